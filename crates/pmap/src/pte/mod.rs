//! What amd64's and riscv's pmaps do the same way on their two PTE
//! formats. Both have 4 KB pages and 2 MB superpages in radix tables, PV
//! lists per page and per 2 MB frame, and the same bits by other names:
//! accessed (PG_A, PTE_A), modified (PG_M, PTE_D), writable (PG_RW,
//! PTE_W), and software bits for wired and managed. The page daemon's
//! operations on them (FreeBSD's pmap_is_modified, pmap_is_referenced,
//! pmap_ts_referenced, pmap_clear_modify, pmap_remove_write) are the same
//! on both, and are written here once; where the two FreeBSD pmaps
//! differ, the format says how (`PteFormat::is_modified`,
//! `PteFormat::may_clear_referenced`).

use crate::base::{Core, RefMod, Remove};
use crate::counters::SizeCounters;
use crate::ptpage;
use crate::radix::{self, Format, Tables};
use crate::refbits::{self, TS_REFERENCED_MAX};
use crate::shootdown::{Batch, Invalidate};
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::{Advice, PmapEnv, PmapId};

const SHIFT_4K: u32 = 12;
const SHIFT_2M: u32 = 21;
const SIZE_4K: u64 = 1 << SHIFT_4K;
const SIZE_2M: u64 = 1 << SHIFT_2M;
const PAGES_2M: u64 = SIZE_2M / SIZE_4K;

/// A PTE format, named by meaning.
pub trait PteFormat: Format {
    /// The first byte a 2 MB leaf maps.
    fn frame_2m(self) -> u64;
    /// The 4 KB frame a last-level leaf maps.
    fn frame_4k(self) -> u64;
    fn writable(self) -> bool;
    fn accessed(self) -> bool;
    /// The modified bit (PG_M, PTE_D).
    fn modified(self) -> bool;
    fn wired(self) -> bool;
    fn managed(self) -> bool;
    /// pmap_is_modified's test of one mapping: amd64 wants PG_M with
    /// PG_RW, riscv PTE_D alone.
    fn is_modified(self) -> bool;
    /// Whether the page daemon may clear the accessed bit of a 4 KB
    /// mapping in place: always on amd64 (safe_to_clear_referenced),
    /// only when not wired on riscv.
    fn may_clear_referenced(self) -> bool;
    /// Without write access and without the modified bit.
    fn write_protected(self) -> Self;
    /// Without write access only.
    fn without_write(self) -> Self;
    /// Without the modified bit.
    fn cleaned(self) -> Self;
    /// Without the accessed bit.
    fn unreferenced(self) -> Self;

    /// Written through a writable mapping: what a page's dirty state is
    /// taken from.
    fn dirty(self) -> bool {
        self.writable() && self.modified()
    }
}

/// A pmap whose tables hold `PteFormat` entries, as amd64's and riscv's
/// do: what the shared operations need of it.
pub trait PtePmap: Core + Tables<Pte: PteFormat> + Remove {
    /// Demotes the 2 MB mapping covering `va`; false if it was removed
    /// instead.
    fn demote_2m(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool;
    /// Removes the 2 MB mapping at `va` whole (its PV entry, its state to
    /// its pages, its stash freed, emptied tables queued on `free`).
    fn remove_2m(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) -> Invalidate;
    /// Invalidates the translations of one address, of any size
    /// (pmap_invalidate_page).
    fn invalidate_page(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate);
    /// Invalidates a 2 MB mapping removed whole.
    fn invalidate_superpage(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate);
    /// The counters of the 2 MB size.
    fn counters_2m(&mut self) -> &mut SizeCounters;
}

/// Removes the 2 MB mapping at `va` in place of demoting it
/// (pmap_demote_pde_abort, pmap_demote_l2_abort): always safe, as a later
/// fault recreates what is needed. Returns false, what the failed
/// demotion returns.
pub fn demote_abort<P: PtePmap>(p: &mut P, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
    let mut free = Vec::new();
    let inv = p.remove_2m(env, pm, va, &mut free);
    p.invalidate_superpage(env, pm, inv);
    ptpage::free_all(env, free);
    p.counters_2m().aborts += 1;
    false
}

/// The entry of every 2 MB mapping of `m`'s frame, then of every 4 KB
/// mapping of `m`.
fn leaves_of<P: PtePmap>(p: &P, env: &PmapEnv, m: Pfn) -> Vec<P::Pte> {
    let big = p.pv().list_sp(m.addr().0).into_iter().map(|(pm, va)| (pm, va, SHIFT_2M));
    let small = p.pv().list(env, m).into_iter().map(|(pm, va)| (pm, va, SHIFT_4K));
    big.chain(small).map(|(pm, va, shift)| radix::rd(env.mem, p.entry(env.mem, pm, va, shift).expect("PV entry without a table"))).collect()
}

/// The address of the entry of the mapping (pm, va) of 2^shift bytes a PV
/// entry names.
fn pv_entry<P: PtePmap>(p: &P, env: &PmapEnv, pm: PmapId, va: u64, shift: u32) -> PhysAddr {
    p.entry(env.mem, pm, va, shift).expect("PV entry without a table")
}

impl<P: PtePmap> RefMod for P {
    /// pmap_is_modified.
    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool {
        leaves_of(self, env, m).into_iter().any(PteFormat::is_modified)
    }

    /// pmap_is_referenced.
    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool {
        leaves_of(self, env, m).into_iter().any(PteFormat::accessed)
    }

    /// pmap_ts_referenced. A 2 MB mapping's accessed bit is cleared only
    /// by the page `refbits` selects, and never when wired; the hardware
    /// model can always clear it in place, so no demotion is needed.
    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32 {
        let mut count = 0;
        for (pm, va) in self.pv().list_sp(m.addr().0) {
            let pa = pv_entry(self, env, pm, va, SHIFT_2M);
            let e: P::Pte = radix::rd(env.mem, pa);
            debug_assert!(e.valid() && e.is_leaf());
            if e.dirty() {
                // The superpage is dirty; only the page under test is marked.
                ptpage::dirty(env, m);
            }
            if e.accessed() {
                if refbits::selected_for_clearing(m, pm, va, SHIFT_2M, PAGES_2M) && !e.wired() {
                    let inv = radix::update(env.mem, pa, e.unreferenced(), va, SIZE_2M);
                    self.invalidate_page(env, pm, inv);
                }
                count += 1;
                if count >= TS_REFERENCED_MAX {
                    return count;
                }
            }
        }
        for (pm, va) in self.pv().list(env, m) {
            let pa = pv_entry(self, env, pm, va, SHIFT_4K);
            let e: P::Pte = radix::rd(env.mem, pa);
            if e.dirty() {
                ptpage::dirty(env, m);
            }
            if e.accessed() {
                if e.may_clear_referenced() {
                    let inv = radix::update(env.mem, pa, e.unreferenced(), va, SIZE_4K);
                    self.invalidate_page(env, pm, inv);
                }
                count += 1;
                if count >= TS_REFERENCED_MAX {
                    break;
                }
            }
        }
        count
    }

    /// pmap_clear_modify. A writable 2 MB mapping is always dirty
    /// (promotion and direct 2 MB mappings write-protect clean ones): it
    /// is demoted, and the one 4 KB mapping of `m` write-protected so that
    /// its next write faults (and the range may be promoted again), `m`
    /// being marked dirty for the caller to clean. 4 KB mappings lose the
    /// modified bit only.
    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv().list_sp(m.addr().0) {
            let e: P::Pte = radix::rd(env.mem, pv_entry(self, env, pm, va, SHIFT_2M));
            if !e.writable() {
                continue;
            }
            if self.demote_2m(env, pm, va) && !e.wired() {
                let va4 = va + (m.addr().0 - e.frame_2m());
                let pa = self.entry(env.mem, pm, va4, SHIFT_4K).expect("demoted mapping without a PTE");
                let pte: P::Pte = radix::rd(env.mem, pa);
                let inv = radix::update(env.mem, pa, pte.write_protected(), va4, SIZE_4K);
                ptpage::dirty(env, m);
                self.invalidate_page(env, pm, inv);
            }
        }
        for (pm, va) in self.pv().list(env, m) {
            let pa = pv_entry(self, env, pm, va, SHIFT_4K);
            let e: P::Pte = radix::rd(env.mem, pa);
            if e.dirty() {
                let inv = radix::update(env.mem, pa, e.cleaned(), va, SIZE_4K);
                self.invalidate_page(env, pm, inv);
            }
        }
    }

    /// Removes every mapping of the 2 MB physical run holding `m`: its
    /// 2 MB mappings whole (no demotion), then the 4 KB mappings of each
    /// of its 512 pages (pmap_remove_all).
    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn) {
        let frame = m.addr().0 & !(SIZE_2M - 1);
        let mut free = Vec::new();
        for (pm, va) in self.pv().list_sp(frame) {
            let inv = self.remove_2m(env, pm, va, &mut free);
            self.invalidate_superpage(env, pm, inv);
        }
        ptpage::free_all(env, free);
        let m0 = PhysAddr(frame).pfn();
        for k in 0..PAGES_2M as u32 {
            let mk = Pfn(m0.0 + k);
            if self.pv().is_mapped(env, mk) {
                self.remove_all(env, mk);
            }
        }
    }
}

/// pmap_remove_write: every writable mapping of `m` is write-protected,
/// writable 2 MB mappings of its frame demoted first; a modified one
/// marks `m` dirty.
pub fn remove_write<P: PtePmap>(p: &mut P, env: &mut PmapEnv, m: Pfn) {
    for (pm, va) in p.pv().list_sp(m.addr().0) {
        let e: P::Pte = radix::rd(env.mem, pv_entry(p, env, pm, va, SHIFT_2M));
        if e.writable() {
            p.demote_2m(env, pm, va);
        }
    }
    for (pm, va) in p.pv().list(env, m) {
        let pa = pv_entry(p, env, pm, va, SHIFT_4K);
        let e: P::Pte = radix::rd(env.mem, pa);
        if e.writable() {
            if e.modified() {
                ptpage::dirty(env, m);
            }
            let inv = radix::update(env.mem, pa, e.write_protected(), va, SIZE_4K);
            p.invalidate_page(env, pm, inv);
        }
    }
}

/// Makes the writable entry `e` at `pa`, mapping `va`, read-only if it
/// was never written, as promotion does to every entry before the
/// superpage's one modified bit covers them all. Returns the entry as it
/// now is.
pub fn write_protect_clean<E: PteFormat>(env: &mut PmapEnv, pa: PhysAddr, va: u64, e: E) -> E {
    if !e.writable() || e.modified() {
        return e;
    }
    let n = e.without_write();
    // No invalidation: a TLB entry of a clean page must be walked again
    // before its first write, and then finds it read-only.
    radix::update(env.mem, pa, n, va, SIZE_4K).unneeded();
    n
}

/// Rewrites each valid entry of [sva, eva) in the last-level table at
/// `table` with `f`, each changed one added to `batch`.
pub fn update_range<E: Format>(env: &mut PmapEnv, table: u64, sva: u64, eva: u64, batch: &mut Batch, mut f: impl FnMut(&mut PmapEnv, E) -> E) {
    let mut va = sva;
    while va < eva {
        let pa = radix::slot(table, va, SHIFT_4K);
        let old: E = radix::rd(env.mem, pa);
        if old.valid() {
            let n = f(env, old);
            if n != old {
                batch.add(radix::update(env.mem, pa, n, va, SIZE_4K));
            }
        }
        va += SIZE_4K;
    }
}

/// What pmap_advise makes of a 4 KB mapping: a managed one loses its
/// accessed bit and, if modified, its modified bit, DONTNEED first giving
/// the modified state to the page.
pub fn advised<E: PteFormat>(env: &mut PmapEnv, e: E, advice: Advice) -> E {
    if !e.managed() {
        e
    } else if e.is_modified() {
        if advice == Advice::DontNeed {
            ptpage::dirty(env, PhysAddr(e.frame_4k()).pfn());
        }
        e.cleaned().unreferenced()
    } else {
        e.unreferenced()
    }
}

impl PteFormat for splab_hw::amd64::pte::Pte {
    fn frame_2m(self) -> u64 {
        self.frame_2m()
    }
    fn frame_4k(self) -> u64 {
        self.frame()
    }
    fn writable(self) -> bool {
        self.has(splab_hw::amd64::pte::PteFlags::RW)
    }
    fn accessed(self) -> bool {
        self.has(splab_hw::amd64::pte::PteFlags::A)
    }
    fn modified(self) -> bool {
        self.has(splab_hw::amd64::pte::PteFlags::D)
    }
    fn wired(self) -> bool {
        self.has(splab_hw::amd64::pte::PteFlags::SW_W)
    }
    fn managed(self) -> bool {
        self.has(splab_hw::amd64::pte::PteFlags::SW_MANAGED)
    }
    fn is_modified(self) -> bool {
        self.dirty()
    }
    fn may_clear_referenced(self) -> bool {
        true
    }
    fn write_protected(self) -> Self {
        self.without(splab_hw::amd64::pte::PteFlags::RW | splab_hw::amd64::pte::PteFlags::D)
    }
    fn without_write(self) -> Self {
        self.without(splab_hw::amd64::pte::PteFlags::RW)
    }
    fn cleaned(self) -> Self {
        self.without(splab_hw::amd64::pte::PteFlags::D)
    }
    fn unreferenced(self) -> Self {
        self.without(splab_hw::amd64::pte::PteFlags::A)
    }
}

impl PteFormat for splab_hw::riscv::pte::Pte {
    fn frame_2m(self) -> u64 {
        self.frame()
    }
    fn frame_4k(self) -> u64 {
        self.frame()
    }
    fn writable(self) -> bool {
        self.has(splab_hw::riscv::pte::PteFlags::W)
    }
    fn accessed(self) -> bool {
        self.has(splab_hw::riscv::pte::PteFlags::A)
    }
    fn modified(self) -> bool {
        self.has(splab_hw::riscv::pte::PteFlags::D)
    }
    fn wired(self) -> bool {
        self.has(splab_hw::riscv::pte::PteFlags::SW_WIRED)
    }
    fn managed(self) -> bool {
        self.has(splab_hw::riscv::pte::PteFlags::SW_MANAGED)
    }
    fn is_modified(self) -> bool {
        self.modified()
    }
    fn may_clear_referenced(self) -> bool {
        !self.wired()
    }
    fn write_protected(self) -> Self {
        self.without(splab_hw::riscv::pte::PteFlags::W | splab_hw::riscv::pte::PteFlags::D)
    }
    fn without_write(self) -> Self {
        self.without(splab_hw::riscv::pte::PteFlags::W)
    }
    fn cleaned(self) -> Self {
        self.without(splab_hw::riscv::pte::PteFlags::D)
    }
    fn unreferenced(self) -> Self {
        self.without(splab_hw::riscv::pte::PteFlags::A)
    }
}

#[cfg(test)]
mod tests;
