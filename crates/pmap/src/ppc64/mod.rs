//! The powerpc64 pmap for hashed page tables: FreeBSD's
//! sys/powerpc/aim/mmu_oea64.c with its superpage support, and the native
//! (no hypervisor) page table operations of moea64_native.c. Function names
//! in comments refer to those files.
//!
//! The hashed page table (HPT) is a cache of translations, not the truth:
//! every mapping is a PVO entry (`Pvo`), kept per address space in address
//! order (FreeBSD's pmap_pvo tree) and per physical page (its PV list, the
//! pvo_vlink list). A PVO is in the HPT when an entry was inserted for it
//! and has not been evicted since; insertion into a full pair of PTEGs
//! evicts another, and the next access to the evicted page takes a page
//! fault that `fault` resolves by inserting its entry again.
//!
//! Superpages (16 MB) follow moea64: a superpage is 4096 PVOs, one per
//! 4 KB page, each marked large; each has its own entry in the HPT, hashed
//! by its 4 KB page (user segments have 4 KB base pages), with L set and LP
//! naming a 16 MB actual page, so that the TLB holds one 16 MB translation
//! whichever entry it was loaded from. Promotion rewrites the 4096 entries;
//! demotion rewrites them back and never needs memory.
//!
//! Segments: each address space has its own VSIDs, allocated on first use
//! of a segment (allocate_user_vsid) and kept in its context page (the
//! root the walker is given) and in a user SLB cache (pm_slb) that is loaded
//! into the SLB of each CPU running the address space at every return to
//! user space. A segment missing from a CPU's SLB is a segment fault,
//! resolved by `fault` (handle_user_slb_spill).
//!
//! What is always true (checked by `check`):
//! - Every PVO maps an in-use frame; a managed PVO (pmap, va) -> m has
//!   exactly one entry on m's PV list, and there are no other entries.
//! - A large PVO belongs to a complete superpage: all 4096 PVOs of its
//!   16 MB-aligned range exist, are large, map consecutive frames of one
//!   16 MB-aligned frame, and agree on protection and flags.
//! - A PVO's slot, when it has one, holds a valid entry that is exactly
//!   the entry built from the PVO (but for R and C); every valid entry in
//!   the HPT is the entry of exactly one PVO. `pte_valid` counts the PVOs
//!   in the HPT, `pte_overflow` those evicted from it.
//! - An HPT entry's permission is its PVO's (write protection removes PP
//!   write permission in the entry before anything else).
//! - TLBs: POWER's TLB and ERAT entries are tagged by virtual address
//!   (VSID), so they survive context switches; every change to an entry
//!   is followed by a `tlbie`, which the hardware broadcasts to every CPU
//!   (no IPIs).

mod check;
mod demote;
mod enter;
mod fault;
mod native;
mod promote;
mod refmod;
mod remove;
mod slb;

use crate::base::{one_superpage_tunable, Core, Md, Params, Tunable};
use crate::counters::{PromoteFail, SizeCounters, SizeNames};
use crate::ptpage;
use crate::pv::PvTable;
use crate::spaces::{pm_accessors, Spaces};
use splab_hw::mmu::{AdUpdate, Walker};
use splab_hw::physmem::PhysMem;
use splab_hw::ppc64::hpt::{HptGeometry, HptWalker};
use splab_hw::ppc64::{LARGE_SHIFT, SEGMENT_SHIFT};
use splab_hw::profile::Profile;
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::{Mapping, PmapEnv, PmapError, PmapId, Prot, Psind};
use splab_vm::sysctl::Sysctls;
use std::collections::{BTreeMap, HashMap};

/// The superpage: 16 MB (HPT_SP_SIZE), 4096 base pages (HPT_SP_PAGES).
pub const SP_SHIFT: u32 = LARGE_SHIFT;
pub const SP_SIZE: u64 = 1 << SP_SHIFT;
pub const SP_MASK: u64 = SP_SIZE - 1;
pub const SP_PAGES: u64 = SP_SIZE >> 12;

const PAGESIZES: [u64; 2] = [4096, SP_SIZE];
const PSIND_SP: Psind = Psind::new(1);
const PARAMS: Params = Params { arch: "ppc64-hpt", pagesizes: &PAGESIZES, reserv_psind: PSIND_SP, max_user_address: splab_hw::ppc64::USER_VA_LIMIT };

/// PVO flags (FreeBSD keeps them in the low bits of pvo_vaddr).
pub(crate) mod pvof {
    /// The mapping is wired (PVO_WIRED); its HPT entry is never evicted.
    pub const WIRED: u8 = 1 << 0;
    /// The page is managed: the PVO is on the page's list (PVO_MANAGED).
    pub const MANAGED: u8 = 1 << 1;
    /// Part of a 16 MB superpage (PVO_LARGE in a user pmap: PVO_IS_SP).
    pub const LARGE: u8 = 1 << 2;
    /// The flags that must agree for promotion (PVO_FLAGS_PROMOTE).
    pub const PROMOTE: u8 = WIRED | MANAGED;
}

/// Referenced and changed bits as FreeBSD passes them around (LPTE_REF,
/// LPTE_CHG), compacted.
pub(crate) mod rc {
    pub const REF: u8 = 1 << 0;
    pub const CHG: u8 = 1 << 1;
}

/// No HPT slot: the PVO's entry was evicted (or not inserted yet).
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// One mapping (struct pvo_entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pvo {
    /// Physical address of the 4 KB page mapped (PVO_PADDR; for a
    /// superpage PVO, its own 4 KB part of the 16 MB frame).
    pub pa: u64,
    pub prot: Prot,
    /// `pvof` bits.
    pub flags: u8,
    /// WIMG bits of the mapping's entry (LPTE_M for all memory here).
    pub wimg: u8,
    /// The HPT slot (PTEG * 8 + index) holding this PVO's entry, or
    /// NO_SLOT (pvo_pte.slot; FreeBSD finds evictions by comparing the
    /// slot's AVPN, the model learns of them when they happen).
    pub slot: u32,
    /// R and C of entries of this PVO that were evicted, kept as the old
    /// moea64_pte_spill kept them, so evictions lose no reference or
    /// change information. For the first PVO of a superpage, also the
    /// superpage's bits cached at promotion (FreeBSD's MDPG_ATTR_SP).
    pub refchg: u8,
}

impl Pvo {
    pub fn large(&self) -> bool {
        self.flags & pvof::LARGE != 0
    }
    pub fn managed(&self) -> bool {
        self.flags & pvof::MANAGED != 0
    }
    pub fn in_table(&self) -> bool {
        self.slot != NO_SLOT
    }
}

/// vm.pmap.sp.*: FreeBSD counts four reasons of failed promotions
/// (sp_p_fail_*) and a missing mapping in p_failures only; splab counts
/// that too.
const SP: SizeNames = SizeNames {
    promotions: ("vm.pmap.sp.promotions", "SP page promotions"),
    p_failures: ("vm.pmap.sp.p_failures", "SP page promotion failures"),
    mappings: ("vm.pmap.sp.mappings", "SP page mappings"),
    demotions: ("vm.pmap.sp.demotions", "SP page demotions"),
    reasons: &[
        (PromoteFail::NotContiguous, "vm.pmap.sp.p_fail_pa", "SP page promotion failure: PAs don't match"),
        (PromoteFail::Flags, "vm.pmap.sp.p_fail_flags", "SP page promotion failure: page flags don't match"),
        (PromoteFail::Prot, "vm.pmap.sp.p_fail_prot", "SP page promotion failure: page protections don't match"),
        (PromoteFail::Wimg, "vm.pmap.sp.p_fail_wimg", "SP page promotion failure: WIMG bits don't match"),
        (PromoteFail::Unmapped, "splab.pmap.sp.p_fail_unmapped", "SP page promotion failure: a page of the range is not mapped"),
    ],
    demotion: None,
};

#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    /// 16 MB pages.
    pub sp: SizeCounters,
    /// Valid HPT entries (moea64_pte_valid).
    pub pte_valid: u64,
    /// PVOs whose entry was evicted and is not back (moea64_pte_overflow).
    pub pte_overflow: u64,
    pub evictions: u64,
    pub reinserts: u64,
    pub slb_spills: u64,
}

/// One address space.
pub(crate) struct Pm {
    /// The context page the walker is given as root: the HTAB descriptor
    /// and the segment table (see splab_hw::ppc64::hpt).
    pub ctx: Pfn,
    /// Mappings by virtual address (pmap_pvo).
    pub pvos: BTreeMap<u64, Pvo>,
    /// The address space's segments, ESID -> VSID (the SLB tree).
    pub segs: HashMap<u64, u64>,
    /// The user SLB cache (pm_slb): ESIDs loaded into the SLB on every
    /// return to user space.
    pub slb_cache: Vec<u64>,
    /// PVOs per 16 MB virtual range (va >> SP_SHIFT), so that a promotion
    /// attempt on a range not fully mapped fails without a scan.
    pub sp_count: HashMap<u64, u32>,
}

/// The powerpc64 pmap for hashed page tables.
pub type PmapPpc64 = Md<Ppc64>;

pub struct Ppc64 {
    /// The address spaces. Their TLB tag is their VSIDs, unique to each:
    /// the pmap's index stands for them (no ASIDs are allocated).
    pub(crate) pmaps: Spaces<Pm>,
    /// The hashed page table, once bootstrapped.
    hpt: Option<HptGeometry>,
    /// The PVOs of each physical page (pvo_vlink lists).
    pub(crate) pv: PvTable,
    /// Owner of each user VSID: (pmap, ESID); lets an eviction find the
    /// PVO of the entry it takes.
    vsid_owner: HashMap<u64, (PmapId, u64)>,
    /// moea64_vsidcontext.
    vsid_ctx: u64,
    /// Stands in for the timebase FreeBSD reads (mftb) where it wants a
    /// cheap random number: first slot to try in a PTEG, SLB cache victim.
    tb: u64,
    superpages_enabled: Tunable,
    pub(crate) st: Stats,
    /// Inside `batched_tlbie`: entries taken out are dropped from the TLBs
    /// at the end of the batch.
    defer_tlbie: bool,
}

impl PmapPpc64 {
    /// A pmap for `npages` of physical memory. FreeBSD leaves superpages
    /// off unless the tunable says otherwise (moea64_init); splab's run
    /// commands pass the setting they were asked for.
    pub fn new(npages: u64, superpages: bool) -> PmapPpc64 {
        Md(Ppc64 {
            pmaps: Spaces::default(),
            hpt: None,
            pv: PvTable::new(npages, SP_SHIFT),
            vsid_owner: HashMap::new(),
            vsid_ctx: 0,
            tb: 0x5851_f42d_4c95_7f2d,
            superpages_enabled: Tunable::new("vm.pmap.superpages_enabled", "Enable support for transparent superpages (FreeBSD's default: 0)", superpages),
            st: Stats::default(),
            defer_tlbie: false,
        })
    }
}

impl Ppc64 {

    pm_accessors!(pmaps);
    pub(crate) fn pvo(&self, pm: PmapId, va: u64) -> Option<&Pvo> {
        self.pm(pm).pvos.get(&(va & !0xfff))
    }
    pub(crate) fn pvo_mut(&mut self, pm: PmapId, va: u64) -> &mut Pvo {
        self.pm_mut(pm).pvos.get_mut(&va).expect("PVO")
    }

    /// The next value of the timebase stand-in.
    pub(crate) fn mftb(&mut self) -> u64 {
        // xorshift64*: deterministic, so runs repeat exactly.
        self.tb ^= self.tb >> 12;
        self.tb ^= self.tb << 25;
        self.tb ^= self.tb >> 27;
        self.tb.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32
    }

    /// The virtual addresses of `pm`'s PVOs in [sva, eva), in order.
    pub(crate) fn pvos_in(&self, pm: PmapId, sva: u64, eva: u64) -> Vec<u64> {
        self.pm(pm).pvos.range(sva..eva).map(|(&va, _)| va).collect()
    }

    /// The first PVO of `pm` at or after `va` and before `eva`.
    pub(crate) fn next_pvo(&self, pm: PmapId, va: u64, eva: u64) -> Option<(u64, Pvo)> {
        self.pm(pm).pvos.range(va..eva).next().map(|(&v, &p)| (v, p))
    }

    /// Hands a mapping's referenced and changed state to its page
    /// (vm_page_dirty, vm_page_aflag_set(PGA_REFERENCED)).
    pub(crate) fn refchg_to_page(env: &mut PmapEnv, m: Pfn, bits: u8) {
        if bits & rc::CHG != 0 {
            ptpage::dirty(env, m);
        }
        if bits & rc::REF != 0 {
            ptpage::referenced(env, m);
        }
    }
}

/// The hashed page table walker for a machine profile, which must let the
/// hardware record R and C and must describe the SLB as its only walk
/// cache: a `[[pwc]]` level at shift 28 (one entry per 256 MB segment).
pub fn walker(profile: &Profile) -> Result<Box<dyn Walker>, String> {
    let name = &profile.name;
    if profile.ad_update == Some(AdUpdate::Fault) {
        return Err(format!("machine profile {name:?}: ad_update = \"fault\" is not a POWER behaviour (the MMU records R and C itself)"));
    }
    if !profile.pwc.iter().any(|l| l.shift as u32 == SEGMENT_SHIFT && l.entries > 0) {
        return Err(format!("machine profile {name:?}: no SLB; ppc64-hpt needs a [[pwc]] level with shift = {SEGMENT_SHIFT}"));
    }
    if let Some(l) = profile.pwc.iter().find(|l| l.shift as u32 != SEGMENT_SHIFT) {
        return Err(format!("machine profile {name:?}: [[pwc]] shift = {}: hashed page table translation has no page-walk cache, only the SLB (shift = {SEGMENT_SHIFT})", l.shift));
    }
    Ok(Box::new(HptWalker))
}

impl Core for Ppc64 {
    fn params(&self) -> Params {
        PARAMS
    }
    one_superpage_tunable!(superpages_enabled);
    fn host_bytes(&self) -> u64 {
        let pvos: u64 = self.pmaps.iter().map(|(_, p)| p.pvos.len() as u64).sum();
        self.pv.host_bytes() + pvos * (std::mem::size_of::<Pvo>() as u64 + 16)
    }

    fn bootstrap(&mut self, env: &mut PmapEnv) {
        self.bootstrap_hpt(env);
    }

    /// moea64_pinit: an empty address space with its context page. The
    /// HPT is made at the first one if the system did not bootstrap it.
    fn pinit(&mut self, env: &mut PmapEnv) -> Result<PmapId, PmapError> {
        self.bootstrap_hpt(env);
        let ctx = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
        env.mem.write_u64(PhysAddr(ctx.addr_4k().0 + splab_hw::ppc64::hpt::CTX_HTAB), self.geom().to_pate());
        let p = Pm { ctx, pvos: BTreeMap::new(), segs: HashMap::new(), slb_cache: Vec::new(), sp_count: HashMap::new() };
        Ok(self.pmaps.insert(p))
    }

    /// moea64_release: the VSIDs go back, the SLBs forget the segments.
    fn release(&mut self, env: &mut PmapEnv, pm: PmapId) {
        let p = self.pmaps.remove(pm);
        debug_assert!(p.pvos.is_empty(), "pmap released with mappings");
        for vsid in p.segs.values() {
            self.vsid_owner.remove(vsid);
        }
        for mmu in env.mmu.iter_mut() {
            mmu.pwc.invalidate_asid(pm as u16);
        }
        env.deactivate(pm);
        ptpage::free(env, p.ctx);
    }

    fn root(&self, pm: PmapId) -> PhysAddr {
        self.pm(pm).ctx.addr_4k()
    }
    /// TLB entries are tagged by VSID, unique to the address space: the
    /// pmap's index stands for them.
    fn asid(&self, pm: PmapId) -> u16 {
        pm as u16
    }

    /// moea64_activate: the CPU's SLB takes the address space's segments
    /// (slbia, then the user SLB cache). The TLB is not flushed.
    fn activate_sw(&mut self, env: &mut PmapEnv, pm: PmapId, cpu: usize) {
        env.mmu[cpu].pwc.invalidate_all();
        self.slb_load_cpu(env, pm, cpu);
    }

    fn fault(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, access: Prot) -> bool {
        self.pmap_fault(env, pm, va, access)
    }

    /// moea64_extract, with the mapping's size, protection and C bit.
    fn extract(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<Mapping> {
        let p = self.pvo(pm, va)?;
        let shift = if p.large() { SP_SHIFT as u8 } else { 12 };
        let dirty = (self.pte_bits(mem, p) | p.refchg) & rc::CHG != 0;
        Some(Mapping { pa: PhysAddr(p.pa | (va & 0xfff)), shift, prot: p.prot, dirty })
    }

    fn counters(&self, out: &mut Sysctls) {
        let s = &self.st;
        s.sp.sysctls(&SP, out);
        out.int("machdep.moea64_pte_valid", s.pte_valid, "Valid entries in the hashed page table");
        out.int("machdep.moea64_pte_overflow", s.pte_overflow, "Mappings evicted from the hashed page table");
        out.int("machdep.moea64_pvo_entries", self.pmaps.iter().map(|(_, p)| p.pvos.len() as u64).sum(), "PVO entries");
        out.int("splab.pmap.hpt.ptegs", self.hpt.map_or(0, |g| g.pteg_count), "PTEGs in the hashed page table");
        out.int("splab.pmap.hpt.evictions", s.evictions, "Entries evicted to make room in a full pair of PTEGs");
        out.int("splab.pmap.hpt.reinserts", s.reinserts, "Evicted entries inserted again on a page fault");
        out.int("splab.pmap.slb.spills", s.slb_spills, "Segment faults resolved by loading the SLB");
        out.int("splab.pmap.slb.vsids", self.vsid_owner.len() as u64, "User VSIDs allocated");
    }
}

#[cfg(test)]
mod tests;
