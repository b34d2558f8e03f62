//! The Alpha pmap: three-level tables of 8 KB pages in the Alpha PTE
//! format (sys/alpha/alpha/pmap.c of FreeBSD 4.x to 6.x for the base
//! design), with transparent superpages by granularity hint as Navarro,
//! Iyer, Druschel and Cox built them on FreeBSD 4.3 on an Alpha 21264
//! (OSDI 2002): reservations of 4 MB, and inside each, aligned blocks of
//! 8 (64 KB), 64 (512 KB) and 512 (4 MB) pages promoted each on its own,
//! incrementally, as soon as the block is populated and its entries agree;
//! demotion one level at a time down to the page that must change.
//!
//! How this differs from the radix pmaps: a granularity-hint superpage is
//! not an entry of a higher level but the same level-3 entries with their
//! GH field set, so promotion and demotion rewrite GH in place, need no
//! memory and never fail, and there is no page-table page to stash. PV
//! entries stay per 8 KB page (as arm64's 64 KB runs keep theirs).
//!
//! Referenced and modified bits are emulated (pmap_emulate_reference):
//! entries are made with FOR clear (the mapping is made for an access) and
//! FOW set unless the access writes; the fault-on trap clears them. A
//! block is one unit for both, as the TB holds one entry for it: the trap
//! clears FOR/FOW in every entry of the block, and the page daemon's
//! operations set them in every entry (clear_modify first demotes, so
//! that one page can become clean).
//!
//! What is always true (checked by `check`):
//! - Every entry of a block of GH g (g > 0) has GH g, lies in the aligned
//!   block of 8^g pages, maps the frame at the same offset of an aligned
//!   physical block, and has the same bits as the block's first entry but
//!   for the frame (FOR and FOW included).
//! - `l3[i].1` counts the valid entries of level-3 table i; `l2[j].1` the
//!   level-3 tables under level-2 table j. Tables with no entries are freed.
//! - Every valid managed entry (pmap, va) -> m has one PV entry on m.
//! - TLBs: entries carry the address space number. A change invalidates
//!   the address on the CPUs running the address space (TBIS by IPI, as
//!   FreeBSD's alpha pmap_invalidate_page); the other CPUs that ran it are
//!   marked, and flush its ASN when they next run it (FreeBSD gives the
//!   pmap a new ASN on them: pmap_get_asn's generation check).

mod ops;
mod promote;

use crate::pv::PvTable;
use crate::shootdown;
use crate::spaces::Spaces;
use splab_hw::alpha::{index, Gh, Pte, PteFlags, L1_SHIFT, L2_SHIFT, L3_SHIFT, MAX_USER_ADDRESS, PAGE_SIZE};
use splab_hw::physmem::PhysMem;
use splab_hw::{Pfn, PhysAddr, VirtAddr};
use splab_vm::pmap::{prot, Advice, EnterFlags, Mapping, Pmap, PmapEnv, PmapError, PmapId, Prot, Psind};
use splab_vm::sysctl::Sysctls;
use std::collections::HashMap;

/// Page sizes: the 8 KB page and the three granularity hints (psind =
/// GH). Reservations cover the largest (VM_LEVEL_0_ORDER 9: 512 pages).
const PAGESIZES: [u64; 4] = [8 << 10, 64 << 10, 512 << 10, 4 << 20];

/// Counter names per level: `vm.pmap.gh.<size>.*`, the size as FreeBSD
/// spells page sizes in its own sysctl descriptions ("64KB page
/// promotions"), under `gh` because the granularity hint is what makes
/// them (as amd64's are under `pde` and arm64's under `l3c` and `l2`, the
/// descriptor that makes them).
const LEVEL_NAMES: [&str; 4] = ["8k", "64k", "512k", "4m"];

/// The counters of one superpage size.
#[derive(Clone, Debug, Default)]
pub(crate) struct SizeStats {
    pub promotions: u64,
    pub p_failures: u64,
    pub mappings: u64,
    pub demotions: u64,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    /// Per GH (index 0 unused).
    pub gh: [SizeStats; 4],
    pub for_faults: u64,
    pub fow_faults: u64,
}

pub(crate) struct Pm {
    /// The level-1 table (the PCB's PTBR).
    pub l1: Pfn,
    /// Level-2 tables by SEG1, with the number of level-3 tables under each.
    pub l2: HashMap<u64, (Pfn, u16)>,
    /// Level-3 tables by va >> L2_SHIFT, with their valid entries.
    pub l3: HashMap<u64, (Pfn, u16)>,
    /// The address space number.
    pub asn: u16,
    /// CPUs that may hold TB entries of this ASN without running it.
    pub stale: u64,
    pub resident: u64,
}

pub struct PmapAlpha {
    pub(crate) spaces: Spaces<Pm>,
    pub(crate) pv: PvTable,
    /// Which GH levels promote and are mapped directly: [_, 64 KB, 512 KB,
    /// 4 MB] (vm.pmap.gh.64k.enabled, vm.pmap.gh.512k.enabled,
    /// vm.pmap.superpages_enabled).
    pub(crate) enabled: [bool; 4],
    pub(crate) st: Stats,
}

/// Base pages in a block of GH g, and its bytes.
#[inline]
pub(crate) fn block_pages(g: u8) -> u64 {
    Gh::new(g).pages()
}
#[inline]
pub(crate) fn block_size(g: u8) -> u64 {
    block_pages(g) * PAGE_SIZE
}

/// Whether an entry records a modification: writable with FOW clear.
#[inline]
pub(crate) fn is_dirty(e: Pte) -> bool {
    e.has(PteFlags::UWE) && !e.has(PteFlags::FOW)
}

impl PmapAlpha {
    /// A pmap for `npages` 8 KB pages, all three superpage levels on or off.
    pub fn new(npages: u64, superpages: bool) -> PmapAlpha {
        // PvTable sizes its (here unused) superpage lists in 4 KB pages.
        PmapAlpha { spaces: Spaces::default(), pv: PvTable::new(npages * 2, 22), enabled: [false, superpages, superpages, superpages], st: Stats::default() }
    }

    pub(crate) fn pm(&self, pm: PmapId) -> &Pm {
        self.spaces.get(pm)
    }
    pub(crate) fn pm_mut(&mut self, pm: PmapId) -> &mut Pm {
        self.spaces.get_mut(pm)
    }

    #[inline]
    pub(crate) fn rd(mem: &PhysMem, pa: PhysAddr) -> Pte {
        Pte(mem.read_u64(pa))
    }
    #[inline]
    pub(crate) fn wr(mem: &mut PhysMem, pa: PhysAddr, e: Pte) {
        mem.write_u64(pa, e.0)
    }

    /// Address of `va`'s level-3 entry, if its table exists (pmap_lev3pte).
    pub(crate) fn l3pte(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<PhysAddr> {
        let (t, _) = self.pm(pm).l3.get(&(va >> L2_SHIFT))?;
        Some(PhysAddr(mem.addr(*t).0 + index(va, L3_SHIFT) * 8))
    }

    /// `va`'s valid level-3 entry and its address.
    pub(crate) fn find(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<(PhysAddr, Pte)> {
        if va >= MAX_USER_ADDRESS {
            return None;
        }
        let p = self.l3pte(mem, pm, va)?;
        let e = Self::rd(mem, p);
        e.valid().then_some((p, e))
    }

    /// The address of `va`'s level-3 entry, allocating the level-2 and
    /// level-3 tables on the way (pmap_allocpte).
    pub(crate) fn alloc_l3pte(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<PhysAddr, PmapError> {
        if let Some(p) = self.l3pte(env.mem, pm, va) {
            return Ok(p);
        }
        let seg1 = va >> L1_SHIFT;
        let l2 = match self.pm(pm).l2.get(&seg1) {
            Some(&(t, _)) => t,
            None => {
                let t = crate::ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
                let l1 = env.mem.addr(self.pm(pm).l1).0;
                Self::wr(env.mem, PhysAddr(l1 + index(va, L1_SHIFT) * 8), Pte::table(env.mem.addr(t).0));
                self.pm_mut(pm).l2.insert(seg1, (t, 0));
                t
            }
        };
        let Some(t) = crate::ptpage::alloc(env) else {
            self.release_l2_if_empty(env, pm, seg1);
            return Err(PmapError::NoMemory);
        };
        Self::wr(env.mem, PhysAddr(env.mem.addr(l2).0 + index(va, L2_SHIFT) * 8), Pte::table(env.mem.addr(t).0));
        self.pm_mut(pm).l2.get_mut(&seg1).expect("just made").1 += 1;
        self.pm_mut(pm).l3.insert(va >> L2_SHIFT, (t, 0));
        Ok(self.l3pte(env.mem, pm, va).expect("just made"))
    }

    fn release_l2_if_empty(&mut self, env: &mut PmapEnv, pm: PmapId, seg1: u64) {
        if self.pm(pm).l2.get(&seg1).is_some_and(|&(_, n)| n == 0) {
            let (t, _) = self.pm_mut(pm).l2.remove(&seg1).expect("present");
            let l1 = env.mem.addr(self.pm(pm).l1).0;
            Self::wr(env.mem, PhysAddr(l1 + (seg1 & 1023) * 8), Pte::EMPTY);
            self.invalidate_all(env, pm);
            crate::ptpage::free(env, t);
        }
    }

    /// One valid entry more (`n` > 0) or fewer in `va`'s level-3 table;
    /// a table left empty is unlinked and freed, and its level-2 table
    /// too when that was its last (pmap_unuse_pt).
    pub(crate) fn count(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, n: i32) {
        let key = va >> L2_SHIFT;
        let c = &mut self.pm_mut(pm).l3.get_mut(&key).expect("table present").1;
        *c = (*c as i32 + n) as u16;
        if *c > 0 {
            return;
        }
        let (t, _) = self.pm_mut(pm).l3.remove(&key).expect("present");
        let seg1 = va >> L1_SHIFT;
        let (l2, _) = self.pm(pm).l2[&seg1];
        Self::wr(env.mem, PhysAddr(env.mem.addr(l2).0 + index(va, L2_SHIFT) * 8), Pte::EMPTY);
        // The walk cache may hold the table's address.
        self.invalidate_all(env, pm);
        crate::ptpage::free(env, t);
        self.pm_mut(pm).l2.get_mut(&seg1).expect("present").1 -= 1;
        self.release_l2_if_empty(env, pm, seg1);
    }

    /// TBIS for `va` on the CPUs running `pm` (pmap_invalidate_page); the
    /// others that ran it flush its ASN before they run it again.
    pub(crate) fn invalidate(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) {
        let asn = self.pm(pm).asn;
        let others = shootdown::invalidate_page(env, pm, asn, va);
        self.pm_mut(pm).stale |= others;
    }

    /// TBIAP on the CPUs running `pm` (pmap_invalidate_all).
    pub(crate) fn invalidate_all(&mut self, env: &mut PmapEnv, pm: PmapId) {
        let asn = self.pm(pm).asn;
        let others = shootdown::invalidate_all(env, pm, asn);
        self.pm_mut(pm).stale |= others;
    }

    /// Invalidates the TB entries that may translate [va, va + size): one
    /// TBIS per page for a few pages, TBIAP beyond (as FreeBSD's alpha
    /// pmap_remove falls back to a full invalidation).
    pub(crate) fn invalidate_range(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, size: u64) {
        if size / PAGE_SIZE > 16 {
            self.invalidate_all(env, pm);
        } else {
            let mut a = va;
            while a < va + size {
                self.invalidate(env, pm, a);
                a += PAGE_SIZE;
            }
        }
    }

    /// The entry pmap_enter makes for frame `pa` (pte_prot and the
    /// reference/modify emulation): kernel and user read, write enables
    /// when writable, FOE unless executable, FOR clear (the mapping is
    /// made for an access) unless the access is none (a speculative
    /// mapping), FOW set unless the access writes.
    pub(crate) fn new_pte(pa: u64, pr: Prot, access: Prot, wired: bool, managed: bool, gh: Gh) -> Pte {
        let mut f = PteFlags::V | PteFlags::KRE | PteFlags::URE;
        if pr & prot::WRITE != 0 {
            f |= PteFlags::KWE | PteFlags::UWE;
        }
        if pr & prot::EXEC == 0 {
            f |= PteFlags::FOE;
        }
        if access == prot::NONE {
            f |= PteFlags::FOR;
        }
        if access & prot::WRITE == 0 || pr & prot::WRITE == 0 {
            f |= PteFlags::FOW;
        }
        if wired {
            f |= PteFlags::WIRED;
        }
        if managed {
            f |= PteFlags::MANAGED;
        }
        Pte::new(pa, f, gh)
    }
}

impl Pmap for PmapAlpha {
    fn arch(&self) -> &'static str {
        "alpha"
    }
    fn pagesizes(&self) -> &'static [u64] {
        &PAGESIZES
    }
    fn superpages_enabled(&self) -> bool {
        self.enabled.iter().any(|&e| e)
    }
    fn reserv_psind(&self) -> Psind {
        Psind::new(3)
    }
    fn max_user_address(&self) -> u64 {
        MAX_USER_ADDRESS
    }

    /// pmap_pinit: an empty level-1 table and an ASN.
    fn pinit(&mut self, env: &mut PmapEnv) -> Result<PmapId, PmapError> {
        let asn = self.spaces.alloc_asid().ok_or(PmapError::NoMemory)?;
        let Some(l1) = crate::ptpage::alloc(env) else {
            self.spaces.free_asid(asn);
            return Err(PmapError::NoMemory);
        };
        Ok(self.spaces.insert(Pm { l1, l2: HashMap::new(), l3: HashMap::new(), asn, stale: 0, resident: 0 }))
    }

    /// pmap_release: the level-1 table goes; every CPU forgets the ASN
    /// before it is given again.
    fn release(&mut self, env: &mut PmapEnv, pm: PmapId) {
        let p = self.spaces.remove(pm);
        debug_assert_eq!(p.resident, 0, "pmap released with mappings");
        debug_assert!(p.l3.is_empty() && p.l2.is_empty(), "pmap released with tables");
        for mmu in env.mmu.iter_mut() {
            mmu.tlb.invalidate_asid(p.asn);
            mmu.pwc.invalidate_asid(p.asn);
        }
        env.deactivate(pm);
        crate::ptpage::free(env, p.l1);
        self.spaces.free_asid(p.asn);
    }

    fn root(&self, pm: PmapId) -> PhysAddr {
        PhysAddr((self.pm(pm).l1.0 as u64) << splab_hw::alpha::PAGE_SHIFT)
    }
    fn asid(&self, pm: PmapId) -> u16 {
        self.pm(pm).asn
    }

    /// pmap_activate: SWPCTX to the new PTBR and ASN. TB entries of other
    /// ASNs stay; a CPU marked stale for this address space flushes its
    /// ASN first (a new ASN, in FreeBSD).
    fn activate(&mut self, env: &mut PmapEnv, pm: PmapId, cpu: usize) {
        if env.curpmap[cpu] == Some(pm) {
            return;
        }
        env.curpmap[cpu] = Some(pm);
        env.ev.context_switches += 1;
        let bit = 1u64 << cpu;
        if self.pm(pm).stale & bit != 0 {
            self.pm_mut(pm).stale &= !bit;
            let asn = self.pm(pm).asn;
            let mmu = &mut env.mmu[cpu];
            mmu.tlb.invalidate_asid(asn);
            mmu.pwc.invalidate_asid(asn);
            env.ev.tlb_flushes += 1;
        }
    }

    fn enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: VirtAddr, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        match flags.psind.index() {
            0 => self.enter_page(env, pm, va.0, m, pr, flags),
            g @ 1..=3 if self.enabled[g] => self.enter_block(env, pm, va.0, m, pr, flags, g as u8),
            _ => Err(PmapError::BadPsind),
        }
    }

    fn enter_object(&mut self, env: &mut PmapEnv, pm: PmapId, start: VirtAddr, end: VirtAddr, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, pr: Prot) {
        self.enter_object_impl(env, pm, start.0, end.0, pages, pr)
    }

    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: VirtAddr, eva: VirtAddr) {
        self.remove_range(env, pm, sva.0, eva.0)
    }

    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list(env, m) {
            self.remove_range(env, pm, va, va + PAGE_SIZE);
        }
    }

    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: VirtAddr, eva: VirtAddr, pr: Prot) {
        self.protect_impl(env, pm, sva.0, eva.0, pr)
    }

    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list(env, m) {
            self.protect_impl(env, pm, va, va + PAGE_SIZE, prot::READ | prot::EXEC);
        }
    }

    /// FreeBSD's alpha pmap predates pmap_advise (added in FreeBSD 10,
    /// after the port was removed): MADV_DONTNEED and MADV_FREE change no
    /// mapping.
    fn advise(&mut self, _env: &mut PmapEnv, _pm: PmapId, _sva: VirtAddr, _eva: VirtAddr, _advice: Advice) {}

    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.pv.list(env, m).into_iter().any(|(pm, va)| self.find(env.mem, pm, va).is_some_and(|(_, e)| is_dirty(e)))
    }

    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.pv.list(env, m).into_iter().any(|(pm, va)| self.find(env.mem, pm, va).is_some_and(|(_, e)| !e.has(PteFlags::FOR)))
    }

    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32 {
        self.ts_referenced_impl(env, m)
    }

    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn) {
        self.clear_modify_impl(env, m)
    }

    /// Every mapping of the pages of a fully populated reservation goes,
    /// blocks whole (no demotion): each block lies inside the reservation.
    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn) {
        let n = env.phys.reserv.npages();
        for i in 0..n {
            for (pm, va) in self.pv.list(env, Pfn(m.0 + i)) {
                let Some((_, e)) = self.find(env.mem, pm, va) else { continue };
                let size = block_size(e.gh().value());
                let base = va & !(size - 1);
                self.remove_range(env, pm, base, base + size);
            }
        }
    }

    fn page_is_mapped(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.pv.is_mapped(env, m)
    }

    fn fault(&mut self, env: &mut PmapEnv, pm: PmapId, va: VirtAddr, access: Prot) -> bool {
        self.emulate_reference(env, pm, va.0, access)
    }

    /// pmap_extract, with the protection the TB grants (a write needs UWE;
    /// FOW only makes it trap) and whether the entry records a write.
    fn extract(&self, mem: &PhysMem, pm: PmapId, va: VirtAddr) -> Option<Mapping> {
        let (_, e) = self.find(mem, pm, va.0)?;
        let shift = e.gh().shift();
        let base = e.frame() & !((1u64 << shift) - 1);
        let mut p = prot::READ;
        if e.has(PteFlags::UWE) {
            p |= prot::WRITE;
        }
        if !e.has(PteFlags::FOE) {
            p |= prot::EXEC;
        }
        Some(Mapping { pa: PhysAddr(base + (va.0 & ((1u64 << shift) - 1))), shift: shift as u8, prot: p, dirty: is_dirty(e) })
    }

    fn sysctls(&self, out: &mut Sysctls) {
        out.int("vm.pmap.superpages_enabled", self.enabled[3] as u64, "Are 4MB (GH 3) page mappings enabled?");
        out.int("vm.pmap.gh.64k.enabled", self.enabled[1] as u64, "Are 64KB (GH 1) page mappings enabled?");
        out.int("vm.pmap.gh.512k.enabled", self.enabled[2] as u64, "Are 512KB (GH 2) page mappings enabled?");
        const DESCR: [[&str; 4]; 4] = [
            ["", "", "", ""],
            ["64KB page promotions", "64KB page promotion failures", "64KB page mappings", "64KB page demotions"],
            ["512KB page promotions", "512KB page promotion failures", "512KB page mappings", "512KB page demotions"],
            ["4MB page promotions", "4MB page promotion failures", "4MB page mappings", "4MB page demotions"],
        ];
        for g in 1..4 {
            let c = &self.st.gh[g];
            let n = |k: &str| format!("vm.pmap.gh.{}.{k}", LEVEL_NAMES[g]);
            out.int(&n("promotions"), c.promotions, DESCR[g][0]);
            out.int(&n("p_failures"), c.p_failures, DESCR[g][1]);
            out.int(&n("mappings"), c.mappings, DESCR[g][2]);
            out.int(&n("demotions"), c.demotions, DESCR[g][3]);
        }
        out.int("splab.pmap.for_faults", self.st.for_faults, "Fault-on-read traps resolved by pmap_emulate_reference");
        out.int("splab.pmap.fow_faults", self.st.fow_faults, "Fault-on-write traps resolved by pmap_emulate_reference");
        out.int("splab.pmap.pv_entries", self.pv.live(), "PV entries in use");
    }

    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), String> {
        let g = match name {
            "vm.pmap.superpages_enabled" => 3,
            "vm.pmap.gh.64k.enabled" => 1,
            "vm.pmap.gh.512k.enabled" => 2,
            _ => return Err(format!("unknown alpha tunable {name:?} (known: vm.pmap.superpages_enabled, vm.pmap.gh.64k.enabled, vm.pmap.gh.512k.enabled)")),
        };
        if value != 0 && value != 1 {
            return Err(format!("{name} must be 0 or 1, not {value}"));
        }
        self.enabled[g] = value == 1;
        Ok(())
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
