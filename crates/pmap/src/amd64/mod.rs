//! The amd64 pmap: 4-level page tables in modelled physical memory, in the
//! x86-64 descriptor format, with transparent 2 MB superpages (promotion,
//! direct 2 MB mappings, demotion, whole-superpage removal, the reference
//! and modify bits the page daemon reads and clears) and explicit
//! 1 GB pages for large-page shared memory. Follows the design of FreeBSD's
//! sys/amd64/amd64/pmap.c; function names in comments refer to it.
//!
//! What is always true (checked by `check`):
//! - Every page-table page is a page with `PTPAGE` set whose `ref_count`
//!   equals its number of valid entries (the root excepted).
//! - Every valid managed 4 KB leaf (pmap, va) -> page m has exactly one PV
//!   entry (pmap, va) on m's list; every managed 2 MB leaf has one on the
//!   list of its 2 MB physical frame (`pvh`); there are no other PV entries.
//! - A page-table page stashed at promotion is referenced by no entry; it
//!   is reused when the superpage is demoted, freed when it is removed.
//! - TLBs: whenever an entry is changed in a way that removes access or
//!   changes the frame, every CPU running the address space has the
//!   address invalidated; CPUs not running it flush its PCID on their next
//!   switch to it.

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
use splab_hw::amd64::pte::{Pte, PteFlags};
use splab_hw::amd64::{PAGE_1G, PAGE_2M, PAGE_SHIFT_4K, PDPSHIFT, PDRSHIFT, PML4SHIFT, VM_MAXUSER_ADDRESS};
use splab_hw::physmem::PhysMem;
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::{prot, EnterFlags, Mapping, PmapEnv, PmapError, PmapId, Prot, Psind};
use splab_vm::sysctl::Sysctls;

const PAGESIZES: [u64; 3] = [4096, PAGE_2M, PAGE_1G];
const PSIND_2M: Psind = Psind::new(1);
const PSIND_1G: Psind = Psind::new(2);
const PARAMS: Params = Params { arch: "amd64", pagesizes: &PAGESIZES, reserv_psind: PSIND_2M, max_user_address: VM_MAXUSER_ADDRESS };

/// Flags of a non-leaf entry pointing at a user page-table page.
fn table_flags() -> PteFlags {
    PteFlags::P | PteFlags::RW | PteFlags::US | PteFlags::A | PteFlags::D
}

/// vm.pmap.pde.*, and the reasons of failed promotions (FreeBSD logs
/// them with CTR; splab counts them).
const PDE: SizeNames = size_names!("pde", "2MB", [
    (FirstMisaligned, "first_misaligned", "Promotion failed: first PTE not 2MB-aligned"),
    (NotAccessed, "not_accessed", "Promotion failed: a PTE not accessed"),
    (NotContiguous, "not_contiguous", "Promotion failed: PTEs not physically contiguous"),
    (Attributes, "attributes", "Promotion failed: PTE attributes differ"),
], demotion: ("Demotions that reused the stashed page-table page", "Demotions that removed the mapping instead"));

#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    /// 2 MB pages.
    pub pde: SizeCounters,
    pub pdpe_demotions: u64,
    pub pdpe_mappings: u64,
}

pub(crate) struct Pm {
    pub pml4: Pfn,
    pub asid: u16,
    /// CPUs that must flush this PCID before running it again.
    pub stale: u64,
    pub stash: Stashes<PDRSHIFT>,
    pub resident: u64,
}

/// The amd64 pmap.
pub type PmapAmd64 = Md<Amd64>;

impl PmapAmd64 {
    pub fn new(npages: u64, superpages: bool) -> PmapAmd64 {
        Md(Amd64 {
            pmaps: Spaces::default(),
            pv: PvTable::new(npages, PDRSHIFT),
            pg_ps_enabled: Tunable::new("vm.pmap.pg_ps_enabled", "Are large page mappings enabled?", superpages),
            st: Stats::default(),
        })
    }
}

pub struct Amd64 {
    pub(crate) pmaps: Spaces<Pm>,
    /// PV lists per 4 KB page and per 2 MB frame.
    pub(crate) pv: PvTable,
    pg_ps_enabled: Tunable,
    pub(crate) st: Stats,
}

impl Amd64 {
    pm_accessors!(pmaps);

    /// Address of the PDE for `va`, if its page directory exists (pmap_pde).
    pub(crate) fn pde_pa(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<PhysAddr> {
        self.entry(mem, pm, va, PDRSHIFT)
    }

    /// Address of the PTE for `va`, if its page-table page exists.
    pub(crate) fn pte_pa(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<PhysAddr> {
        self.entry(mem, pm, va, PAGE_SHIFT_4K)
    }

    /// Makes sure the PDPT page for `va` exists; returns the PML4 entry.
    pub(crate) fn alloc_pdpt(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<Pte, PmapError> {
        let pml4e_pa = radix::slot(self.root_table(pm), va, PML4SHIFT);
        let mut pml4e = Pte::read(env.mem, pml4e_pa);
        if !pml4e.valid() {
            let p = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
            pml4e = Pte::new(p.addr_4k().0, table_flags());
            radix::wr(env.mem, pml4e_pa, pml4e);
        }
        Ok(pml4e)
    }

    /// Makes sure the page directory for `va` exists, allocating the PDPT
    /// and PD pages as needed (the upper part of pmap_allocpte). A 1 GB
    /// mapping in the way is demoted. Returns the PDE's address.
    pub(crate) fn alloc_pde(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<PhysAddr, PmapError> {
        let pml4e = self.alloc_pdpt(env, pm, va)?;
        let pdpe_pa = radix::slot(pml4e.frame(), va, PDPSHIFT);
        let mut pdpe = Pte::read(env.mem, pdpe_pa);
        if pdpe.valid() && pdpe.has(PteFlags::PS) {
            self.demote_pdpe(env, pm, va)?;
            pdpe = Pte::read(env.mem, pdpe_pa);
        }
        if !pdpe.valid() {
            let p = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
            pdpe = Pte::new(p.addr_4k().0, table_flags());
            radix::wr(env.mem, pdpe_pa, pdpe);
            ptpage::adjust_ref(env, pml4e.frame(), 1);
        }
        Ok(radix::slot(pdpe.frame(), va, PDRSHIFT))
    }

    /// Invalidates one address (pmap_invalidate_page) on every CPU running
    /// `pm`; the others flush the PCID when they next switch to it (the
    /// PCID scheme of FreeBSD's pmap_invalidate_*). INVLPG drops the
    /// translations of the address of every size.
    pub(crate) fn invalidate_page(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate) {
        let others = shootdown::invalidate_page(env, pm, self.pm(pm).asid, inv.va);
        self.pm_mut(pm).stale |= others;
    }

    /// Invalidates all of `pm`'s translations (pmap_invalidate_all) if
    /// `batch` holds changes.
    pub(crate) fn invalidate_all(&mut self, env: &mut PmapEnv, pm: PmapId, batch: &mut Batch) {
        if batch.take().is_some() {
            let others = shootdown::invalidate_all(env, pm, self.pm(pm).asid);
            self.pm_mut(pm).stale |= others;
        }
    }

    fn leaf_prot(e: Pte) -> Prot {
        let mut p = prot::READ;
        if e.has(PteFlags::RW) {
            p |= prot::WRITE;
        }
        if !e.has(PteFlags::NX) {
            p |= prot::EXEC;
        }
        p
    }

    /// PTE bits for a new mapping of `pa` with `prot` (pmap_enter's newpte).
    pub(crate) fn new_pte(pa: u64, pr: Prot, flags: &EnterFlags, managed: bool) -> Pte {
        let mut f = PteFlags::P | PteFlags::US;
        if pr & prot::WRITE != 0 {
            f |= PteFlags::RW;
        }
        if pr & prot::EXEC == 0 {
            f |= PteFlags::NX;
        }
        if flags.access & prot::ALL != 0 {
            f |= PteFlags::A;
        }
        if flags.access & prot::WRITE != 0 {
            f |= PteFlags::D;
        }
        if flags.wired {
            f |= PteFlags::SW_W;
        }
        if managed {
            f |= PteFlags::SW_MANAGED;
        }
        Pte::new(pa, f)
    }
}

impl Tables for Amd64 {
    type Pte = Pte;
    fn shifts(&self) -> &'static [u32] {
        &[PML4SHIFT, PDPSHIFT, PDRSHIFT, PAGE_SHIFT_4K]
    }
    fn root_table(&self, pm: PmapId) -> u64 {
        self.pm(pm).pml4.addr_4k().0
    }
    fn resident(&self, pm: PmapId) -> u64 {
        self.pm(pm).resident
    }
}

impl Core for Amd64 {
    fn params(&self) -> Params {
        PARAMS
    }
    one_superpage_tunable!(pg_ps_enabled);

    fn pinit(&mut self, env: &mut PmapEnv) -> Result<PmapId, PmapError> {
        let pml4 = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
        let Some(asid) = self.pmaps.alloc_asid() else {
            ptpage::free(env, pml4);
            return Err(PmapError::NoMemory);
        };
        Ok(self.pmaps.insert(Pm { pml4, asid, stale: 0, stash: Stashes::default(), resident: 0 }))
    }

    fn release(&mut self, env: &mut PmapEnv, pm: PmapId) {
        let p = self.pmaps.remove(pm);
        debug_assert_eq!(p.resident, 0, "pmap released with mappings");
        p.stash.release(env);
        // The PCID may be reused: no CPU may keep its translations.
        shootdown::forget_asid(env, p.asid);
        env.deactivate(pm);
        env.phys.pages.get_mut(p.pml4).ref_count = 0;
        ptpage::free(env, p.pml4);
        self.pmaps.free_asid(p.asid);
    }

    fn root(&self, pm: PmapId) -> PhysAddr {
        self.pm(pm).pml4.addr_4k()
    }
    fn asid(&self, pm: PmapId) -> u16 {
        self.pm(pm).asid
    }

    /// A CPU marked stale for this address space flushes its PCID first.
    fn activate_sw(&mut self, env: &mut PmapEnv, pm: PmapId, cpu: usize) {
        let p = self.pm_mut(pm);
        shootdown::flush_if_stale(env, cpu, p.asid, &mut p.stale);
    }

    fn extract(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<Mapping> {
        let (e, shift, _) = self.find_leaf(mem, pm, va)?;
        let base = match shift {
            PDPSHIFT => e.frame_1g(),
            PDRSHIFT => e.frame_2m(),
            _ => e.frame(),
        };
        let off = va & ((1u64 << shift) - 1);
        Some(Mapping { pa: PhysAddr(base + off), shift: shift as u8, prot: Self::leaf_prot(e), dirty: e.has(PteFlags::D) })
    }

    fn size_counters(&self, psind: Psind) -> Option<&SizeCounters> {
        (psind == PSIND_2M).then_some(&self.st.pde)
    }
    fn counters(&self, out: &mut Sysctls) {
        let s = &self.st;
        s.pde.sysctls(&PDE, out);
        out.int("vm.pmap.pdpe.demotions", s.pdpe_demotions, "1GB page demotions");
        out.int("splab.pmap.pdpe.mappings", s.pdpe_mappings, "1GB page mappings");
        out.int("splab.pmap.pv_entries", self.pv.live(), "PV entries in use");
    }
}

#[cfg(test)]
mod tests;
