//! The riscv pmap: Sv39 (or Sv48) page tables in modelled physical memory,
//! in the RISC-V PTE format, with transparent 2 MB superpages (promotion,
//! direct 2 MB mappings, demotion, whole-superpage removal), explicit 1 GB
//! pages for large-page shared memory, and software maintenance of the
//! accessed and dirty bits when the hardware leaves them to software.
//! Follows the design of FreeBSD's sys/riscv/riscv/pmap.c; function names in
//! comments refer to it (and to amd64's pmap.c where riscv has no
//! counterpart).
//!
//! Tables are named as FreeBSD names them: L3 tables hold 4 KB leaves, L2
//! entries map 2 MB, L1 entries 1 GB, and under Sv48 an L0 table is the
//! root (under Sv39 the root is the L1 table). A pointer to the next table
//! is V alone; a leaf is V|R with W, X, U, A, D and the software bits.
//!
//! What is always true (checked by `check`):
//! - Every page-table page but the root is a page with `PTPAGE` set whose
//!   `ref_count` equals its number of valid entries.
//! - Pointers have no bit but V set; leaves are user leaves with R set,
//!   never W without D at 2 MB (promotion write-protects clean entries, and
//!   a writable 2 MB mapping is only made dirty), and frames aligned to
//!   their size.
//! - Every valid managed 4 KB leaf (pmap, va) -> m has exactly one PV entry
//!   (pmap, va) on m's list; every managed 2 MB leaf has one on the list of
//!   its 2 MB physical frame; there are no other PV entries.
//! - A page-table page stashed at promotion is referenced by no entry; it
//!   is reused when the superpage is demoted, freed when it is removed.
//! - TLBs: FreeBSD's riscv pmap uses no ASIDs: every address space runs
//!   with ASID 0 and a context switch flushes the CPU's TLB
//!   (pmap_activate_sw). So only CPUs running an address space can hold its
//!   translations, and every change that removes access or changes a frame
//!   is fenced (SFENCE.VMA) on exactly those CPUs.

mod check;
mod demote;
mod enter;
mod fault;
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
use splab_hw::physmem::PhysMem;
use splab_hw::riscv::pte::{Pte, PteFlags};
use splab_hw::riscv::{Mode, L1_SIZE, L2_SHIFT, L2_SIZE};
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::{prot, EnterFlags, Mapping, PmapEnv, PmapError, PmapId, Prot, Psind};
use splab_vm::sysctl::Sysctls;

const PAGESIZES: [u64; 3] = [4096, L2_SIZE, L1_SIZE];
const PSIND_L2: Psind = Psind::new(1);
const PSIND_L1: Psind = Psind::new(2);

/// The ASID every address space runs with: FreeBSD's riscv pmap leaves
/// satp.ASID at 0 and flushes on every switch instead.
const ASID: u16 = 0;

/// vm.pmap.l2.*, and the reasons of failed promotions (FreeBSD logs them
/// with CTR; splab counts them).
const L2: SizeNames = size_names!("l2", "2MB", [
    (FirstMisaligned, "first_misaligned", "Promotion failed: first PTE not 2MB-aligned"),
    (NotContiguous, "not_contiguous", "Promotion failed: PTEs not physically contiguous"),
    (Attributes, "attributes", "Promotion failed: PTE attributes differ"),
], demotion: ("Demotions that reused the stashed page-table page", "Demotions that removed the mapping instead"));

#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    /// 2 MB pages.
    pub l2: SizeCounters,
    pub l1_mappings: u64,
    pub l1_demotions: u64,
    pub ad_faults: u64,
}

pub(crate) struct Pm {
    /// The root table (satp.PPN).
    pub root: Pfn,
    /// Page-table pages kept aside at promotion.
    pub stash: Stashes<L2_SHIFT>,
    /// Base pages mapped.
    pub resident: u64,
}

/// The riscv pmap, Sv39 or Sv48.
pub type PmapRiscv = Md<Riscv>;

impl PmapRiscv {
    pub fn new(mode: Mode, npages: u64, superpages: bool) -> PmapRiscv {
        Md(Riscv {
            mode,
            pmaps: Spaces::default(),
            pv: PvTable::new(npages, L2_SHIFT),
            superpages_enabled: Tunable::new("vm.pmap.superpages_enabled", "Enable support for transparent superpages", superpages),
            st: Stats::default(),
        })
    }
}

pub struct Riscv {
    pub(crate) mode: Mode,
    pub(crate) pmaps: Spaces<Pm>,
    /// PV lists per 4 KB page and per 2 MB frame.
    pub(crate) pv: PvTable,
    superpages_enabled: Tunable,
    pub(crate) st: Stats,
}

impl Riscv {
    pm_accessors!(pmaps);

    /// Returns the address of the entry for `va` among those mapping
    /// 2^shift bytes, allocating the tables above it as needed
    /// (pmap_alloc_l2, pmap_alloc_l3, _pmap_alloc_l3). A superpage mapping
    /// in the way is demoted (pmap_enter's pmap_demote_l2_locked; a 1 GB one
    /// as amd64's pmap_demote_pdpe does); since a failed 2 MB demotion
    /// removes the mapping and may free tables on the path, the walk then
    /// starts over.
    pub(crate) fn alloc_entry(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, shift: u32) -> Result<PhysAddr, PmapError> {
        'walk: loop {
            let mut table = self.root_table(pm);
            let mut counted = false; // the root's entries are not counted
            for &s in self.mode.shifts() {
                let pa = radix::slot(table, va, s);
                if s == shift {
                    return Ok(pa);
                }
                let mut e = Pte::read(env.mem, pa);
                if e.is_leaf() {
                    match s {
                        splab_hw::riscv::L1_SHIFT => self.demote_l1(env, pm, va)?,
                        L2_SHIFT => {
                            self.demote_l2(env, pm, va);
                        }
                        _ => unreachable!("a leaf at shift {s} is never made"),
                    }
                    continue 'walk;
                }
                if !e.valid() {
                    let Some(p) = ptpage::alloc(env) else {
                        // Unlink the tables this call made and could not fill.
                        let mut free = Vec::new();
                        self.prune(env, pm, va, s, &mut free);
                        ptpage::free_all(env, free);
                        return Err(PmapError::NoMemory);
                    };
                    e = Pte::table(p.addr_4k().0);
                    radix::wr(env.mem, pa, e);
                    if counted {
                        ptpage::adjust_ref(env, table, 1);
                    }
                }
                table = e.frame();
                counted = true;
            }
            unreachable!("no table level maps 2^{shift} bytes");
        }
    }

    /// Whether the table at `table` is `pm`'s root (whose entries are not
    /// counted).
    pub(crate) fn is_root(&self, pm: PmapId, table: u64) -> bool {
        table == self.root_table(pm)
    }

    /// SFENCE.VMA of one address on every CPU running `pm`
    /// (pmap_invalidate_page): it drops the translations of the address of
    /// every size. CPUs not running `pm` hold none of its translations.
    pub(crate) fn invalidate_page(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate) {
        shootdown::invalidate_page(env, pm, ASID, inv.va);
    }

    /// pmap_invalidate_range, which FreeBSD's riscv pmap implements as a
    /// full fence: SFENCE.VMA of everything on every CPU running `pm`.
    pub(crate) fn invalidate_range(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate) {
        let mut batch = Batch::new();
        batch.add(inv);
        self.invalidate_all(env, pm, &mut batch);
    }

    /// SFENCE.VMA of everything on every CPU running `pm`
    /// (pmap_invalidate_all), if `batch` holds changes.
    pub(crate) fn invalidate_all(&mut self, env: &mut PmapEnv, pm: PmapId, batch: &mut Batch) {
        if batch.take().is_some() {
            shootdown::invalidate_all(env, pm, ASID);
        }
    }

    /// PTE bits for a new mapping of `pa` with `pr` (pmap_enter's new_l3):
    /// always V, R and U (user addresses); W and X as `pr` says; A when the
    /// mapping is made for an access (FreeBSD's pmap_enter always has one;
    /// pmap_enter_quick's speculative mappings do not); D for a write
    /// access, and for any writable unmanaged mapping, whose modified state
    /// nobody tracks.
    pub(crate) fn new_pte(pa: u64, pr: Prot, flags: &EnterFlags, managed: bool) -> Pte {
        let mut f = PteFlags::V | PteFlags::R | PteFlags::U;
        if pr & prot::WRITE != 0 {
            f |= PteFlags::W;
        }
        if pr & prot::EXEC != 0 {
            f |= PteFlags::X;
        }
        if flags.access & prot::ALL != 0 {
            f |= PteFlags::A;
        }
        if flags.access & prot::WRITE != 0 || (!managed && pr & prot::WRITE != 0) {
            f |= PteFlags::D;
        }
        if flags.wired {
            f |= PteFlags::SW_WIRED;
        }
        if managed {
            f |= PteFlags::SW_MANAGED;
        }
        Pte::new(pa, f)
    }

    fn leaf_prot(e: Pte) -> Prot {
        let mut p = prot::NONE;
        for (f, b) in [(PteFlags::R, prot::READ), (PteFlags::W, prot::WRITE), (PteFlags::X, prot::EXEC)] {
            if e.has(f) {
                p |= b;
            }
        }
        p
    }
}

impl Tables for Riscv {
    type Pte = Pte;
    fn shifts(&self) -> &'static [u32] {
        self.mode.shifts()
    }
    fn root_table(&self, pm: PmapId) -> u64 {
        self.pm(pm).root.addr_4k().0
    }
    fn resident(&self, pm: PmapId) -> u64 {
        self.pm(pm).resident
    }
}

impl Core for Riscv {
    fn params(&self) -> Params {
        let arch = match self.mode {
            Mode::Sv39 => "riscv",
            Mode::Sv48 => "riscv-sv48",
        };
        Params { arch, pagesizes: &PAGESIZES, reserv_psind: PSIND_L2, max_user_address: self.mode.max_user_address() }
    }
    one_superpage_tunable!(superpages_enabled);

    /// pmap_pinit: a zeroed root table.
    fn pinit(&mut self, env: &mut PmapEnv) -> Result<PmapId, PmapError> {
        let root = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
        Ok(self.pmaps.insert(Pm { root, stash: Stashes::default(), resident: 0 }))
    }

    /// pmap_release. CPUs that ran the address space keep its (ASID 0)
    /// translations only until their next switch, which flushes them.
    fn release(&mut self, env: &mut PmapEnv, pm: PmapId) {
        let p = self.pmaps.remove(pm);
        debug_assert_eq!(p.resident, 0, "pmap released with mappings");
        p.stash.release(env);
        env.deactivate(pm);
        ptpage::free(env, p.root);
    }

    fn root(&self, pm: PmapId) -> PhysAddr {
        self.pm(pm).root.addr_4k()
    }
    fn asid(&self, _pm: PmapId) -> u16 {
        ASID
    }

    /// pmap_activate_sw: satp takes the new root, then SFENCE.VMA flushes
    /// everything (no ASIDs).
    fn activate_sw(&mut self, env: &mut PmapEnv, _pm: PmapId, cpu: usize) {
        let mmu = &mut env.mmu[cpu];
        mmu.tlb.invalidate_all();
        mmu.pwc.invalidate_all();
        env.ev.tlb_flushes += 1;
    }

    fn fault(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, access: Prot) -> bool {
        self.pmap_fault(env, pm, va, access)
    }

    fn extract(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<Mapping> {
        let (e, shift, _) = self.find_leaf(mem, pm, va)?;
        let off = va & ((1u64 << shift) - 1);
        Some(Mapping { pa: PhysAddr(e.frame() + off), shift: shift as u8, prot: Self::leaf_prot(e), dirty: e.has(PteFlags::D) })
    }

    fn size_counters(&self, psind: Psind) -> Option<&SizeCounters> {
        (psind == PSIND_L2).then_some(&self.st.l2)
    }
    fn counters(&self, out: &mut Sysctls) {
        let s = &self.st;
        out.int("vm.pmap.mode", self.mode.sysctl_value(), "translation mode, 0 = SV39, 1 = SV48");
        s.l2.sysctls(&L2, out);
        out.int("splab.pmap.l1.mappings", s.l1_mappings, "1GB page mappings");
        out.int("splab.pmap.l1.demotions", s.l1_demotions, "1GB page demotions");
        out.int("splab.pmap.ad_faults", s.ad_faults, "Page faults resolved by pmap_fault (accessed/dirty bit updates)");
        out.int("splab.pmap.pv_entries", self.pv.live(), "PV entries in use");
    }
}

#[cfg(test)]
mod tests;
