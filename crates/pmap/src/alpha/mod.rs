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

mod check;
mod demote;
mod enter;
mod fault;
mod promote;
mod refmod;
mod remove;

use crate::base::{Core, Md, Params, Tunable};
use crate::counters::{size_names, SizeCounters, SizeNames};
use crate::pv::PvTable;
use crate::shootdown::{self, Batch, Invalidate};
use crate::spaces::{pm_accessors, Spaces};
use splab_hw::alpha::{index, Gh, Pte, PteFlags, L1_SHIFT, L2_SHIFT, L3_SHIFT, MAX_USER_ADDRESS, PAGE_SIZE};
use splab_hw::physmem::PhysMem;
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::{prot, Mapping, PmapEnv, PmapError, PmapId, Prot, Psind};
use splab_vm::sysctl::Sysctls;
use std::collections::HashMap;

/// Page sizes: the 8 KB page and the three granularity hints (psind =
/// GH). Reservations cover the largest (VM_LEVEL_0_ORDER 9: 512 pages).
const PAGESIZES: [u64; 4] = [8 << 10, 64 << 10, 512 << 10, 4 << 20];
const PARAMS: Params = Params { arch: "alpha", pagesizes: &PAGESIZES, reserv_psind: Psind::new(3), max_user_address: MAX_USER_ADDRESS };

/// Counter names per level: `vm.pmap.gh.<size>.*`, the size as FreeBSD
/// spells page sizes in its own sysctl descriptions ("64KB page
/// promotions"), under `gh` because the granularity hint is what makes
/// them (as amd64's are under `pde` and arm64's under `l3c` and `l2`, the
/// descriptor that makes them). Failed promotions are not told apart.
const GH_NAMES: [SizeNames; 3] = [size_names!("gh.64k", "64KB", []), size_names!("gh.512k", "512KB", []), size_names!("gh.4m", "4MB", [])];

#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    /// Per GH (index 0 unused).
    pub gh: [SizeCounters; 4],
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

/// The Alpha pmap.
pub type PmapAlpha = Md<Alpha>;

impl PmapAlpha {
    /// A pmap for `npages` 8 KB pages, all three superpage levels on or off.
    pub fn new(npages: u64, superpages: bool) -> PmapAlpha {
        Md(Alpha {
            spaces: Spaces::default(),
            // PvTable sizes its (here unused) superpage lists in 4 KB pages.
            pv: PvTable::new(npages * 2, 22),
            gh: [
                Tunable::new("vm.pmap.gh.64k.enabled", "Are 64KB (GH 1) page mappings enabled?", superpages),
                Tunable::new("vm.pmap.gh.512k.enabled", "Are 512KB (GH 2) page mappings enabled?", superpages),
                Tunable::new("vm.pmap.superpages_enabled", "Are 4MB (GH 3) page mappings enabled?", superpages),
            ],
            st: Stats::default(),
        })
    }
}

pub struct Alpha {
    pub(crate) spaces: Spaces<Pm>,
    pub(crate) pv: PvTable,
    /// Whether GH 1, 2 and 3 promote and are mapped directly.
    pub(crate) gh: [Tunable; 3],
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

impl Alpha {
    /// Whether blocks of GH `g` (1 to 3) promote and are mapped directly.
    pub(crate) fn enabled(&self, g: u8) -> bool {
        self.gh[g as usize - 1].on
    }

    pm_accessors!(spaces);

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
            let inv = Self::update(env.mem, PhysAddr(l1 + (seg1 & 1023) * 8), Pte::EMPTY, seg1 << L1_SHIFT, 1 << L1_SHIFT);
            self.invalidate_all(env, pm, inv);
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
        let l2e = PhysAddr(env.mem.addr(l2).0 + index(va, L2_SHIFT) * 8);
        let inv = Self::update(env.mem, l2e, Pte::EMPTY, key << L2_SHIFT, 1 << L2_SHIFT);
        // The walk cache may hold the table's address.
        self.invalidate_all(env, pm, inv);
        crate::ptpage::free(env, t);
        self.pm_mut(pm).l2.get_mut(&seg1).expect("present").1 -= 1;
        self.release_l2_if_empty(env, pm, seg1);
    }

    /// Writes `e` over the live entry at `pa`, which translates
    /// [va, va + size).
    pub(crate) fn update(mem: &mut PhysMem, pa: PhysAddr, e: Pte, va: u64, size: u64) -> Invalidate {
        Self::wr(mem, pa, e);
        Invalidate::new(va, size)
    }

    /// TBIS for `va` on the CPUs running `pm` (pmap_invalidate_page); the
    /// others that ran it flush its ASN before they run it again.
    fn tbis(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) {
        let asn = self.pm(pm).asn;
        let others = shootdown::invalidate_page(env, pm, asn, va);
        self.pm_mut(pm).stale |= others;
    }

    /// TBIAP on the CPUs running `pm` (pmap_invalidate_all).
    fn tbiap(&mut self, env: &mut PmapEnv, pm: PmapId) {
        let asn = self.pm(pm).asn;
        let others = shootdown::invalidate_all(env, pm, asn);
        self.pm_mut(pm).stale |= others;
    }

    /// TBIS of the change's address: it removes the TB entry of the page
    /// or block holding it.
    pub(crate) fn invalidate(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate) {
        self.tbis(env, pm, inv.va);
    }

    /// TBIAP for a change (a table unlinked, which the walk cache may
    /// hold).
    pub(crate) fn invalidate_all(&mut self, env: &mut PmapEnv, pm: PmapId, _inv: Invalidate) {
        self.tbiap(env, pm);
    }

    /// After changing blocks of smaller sizes into one: TBIS at an address
    /// of each old block, `old`, as the TB holds one entry for each.
    pub(crate) fn invalidate_blocks(&mut self, env: &mut PmapEnv, pm: PmapId, _inv: Invalidate, old: &[u64]) {
        for &a in old {
            self.tbis(env, pm, a);
        }
    }

    /// One TBIS at `va` if `batch` holds changes, all to the block holding
    /// `va`.
    pub(crate) fn invalidate_block(&mut self, env: &mut PmapEnv, pm: PmapId, batch: &mut Batch, va: u64) {
        if batch.take().is_some() {
            self.tbis(env, pm, va);
        }
    }

    /// If `batch` holds changes, invalidates the TB entries that may
    /// translate [va, va + size): one TBIS per page for a few pages, TBIAP
    /// beyond (as FreeBSD's alpha pmap_remove falls back to a full
    /// invalidation).
    pub(crate) fn invalidate_range(&mut self, env: &mut PmapEnv, pm: PmapId, batch: &mut Batch, va: u64, size: u64) {
        if batch.take().is_none() {
            return;
        }
        if size / PAGE_SIZE > 16 {
            self.tbiap(env, pm);
        } else {
            let mut a = va;
            while a < va + size {
                self.tbis(env, pm, a);
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

impl Core for Alpha {
    fn params(&self) -> Params {
        PARAMS
    }
    fn superpages_enabled(&self) -> bool {
        self.gh.iter().any(|t| t.on)
    }
    fn tunables(&self) -> Vec<&Tunable> {
        let [g1, g2, g3] = &self.gh;
        vec![g3, g1, g2]
    }
    fn tunables_mut(&mut self) -> Vec<&mut Tunable> {
        let [g1, g2, g3] = &mut self.gh;
        vec![g3, g1, g2]
    }
    fn pv(&self) -> &PvTable {
        &self.pv
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
        shootdown::forget_asid(env, p.asn);
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

    /// SWPCTX to the new PTBR and ASN. TB entries of other ASNs stay; a
    /// CPU marked stale for this address space flushes its ASN first (a
    /// new ASN, in FreeBSD).
    fn activate_sw(&mut self, env: &mut PmapEnv, pm: PmapId, cpu: usize) {
        let p = self.pm_mut(pm);
        shootdown::flush_if_stale(env, cpu, p.asn, &mut p.stale);
    }

    fn fault(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, access: Prot) -> bool {
        self.emulate_reference(env, pm, va, access)
    }

    /// pmap_extract, with the protection the TB grants (a write needs UWE;
    /// FOW only makes it trap) and whether the entry records a write.
    fn extract(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<Mapping> {
        let (_, e) = self.find(mem, pm, va)?;
        let shift = e.gh().shift();
        let base = e.frame() & !((1u64 << shift) - 1);
        let mut p = prot::READ;
        if e.has(PteFlags::UWE) {
            p |= prot::WRITE;
        }
        if !e.has(PteFlags::FOE) {
            p |= prot::EXEC;
        }
        Some(Mapping { pa: PhysAddr(base + (va & ((1u64 << shift) - 1))), shift: shift as u8, prot: p, dirty: is_dirty(e) })
    }

    fn counters(&self, out: &mut Sysctls) {
        for (g, names) in GH_NAMES.iter().enumerate() {
            self.st.gh[g + 1].sysctls(names, out);
        }
        out.int("splab.pmap.for_faults", self.st.for_faults, "Fault-on-read traps resolved by pmap_emulate_reference");
        out.int("splab.pmap.fow_faults", self.st.fow_faults, "Fault-on-write traps resolved by pmap_emulate_reference");
        out.int("splab.pmap.pv_entries", self.pv.live(), "PV entries in use");
    }
}

#[cfg(test)]
mod tests;
