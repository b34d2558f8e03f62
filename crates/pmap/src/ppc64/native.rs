//! The hashed page table itself, as moea64_native.c runs it without a
//! hypervisor: its size and allocation at boot (moea64_early_bootstrap,
//! moea64_bootstrap_native), building an entry from a PVO
//! (moea64_pte_from_pvo), insertion into the primary or secondary PTEG with
//! eviction when both are full (moea64_pte_insert_native), removal and
//! replacement (moea64_pte_unset_native, moea64_pte_replace_native), and
//! reading the R and C bits (moea64_pte_synch_native). Every entry taken
//! out is followed by a tlbie, which the hardware broadcasts to all CPUs.

use super::{rc, Ppc64, Pvo, NO_SLOT};
use crate::shootdown::{self, Invalidate};
use splab_hw::physmem::PhysMem;
use splab_hw::ppc64::hpt::{HptGeometry, MIN_PTEGS};
use splab_hw::ppc64::pte::{Hpte, HpteHi, HpteLo};
use splab_hw::ppc64::{esid, BASE_SHIFT, PTEG_BYTES, PTEG_ENTRIES, SEGMENT_SHIFT};
use splab_hw::{Pfn, PhysAddr};
use splab_vm::page::pflags;
use splab_vm::pmap::{prot, PmapEnv, PmapId};

/// The number of PTEGs FreeBSD gives a machine of `npages` 4 KB pages
/// (moea64_early_bootstrap): half the smallest power of two that is at
/// least the page count and at least 4096, so about one PTEG (eight
/// entries) per two pages, and never fewer than the ISA's 2048.
pub fn pteg_count(npages: u64) -> u64 {
    let mut n = 0x1000u64;
    while n < npages {
        n <<= 1;
    }
    (n >> 1).max(MIN_PTEGS)
}

impl Ppc64 {
    pub(crate) fn geom(&self) -> HptGeometry {
        self.hpt.expect("the hashed page table is bootstrapped")
    }

    /// Allocates and clears the hashed page table, aligned to its size
    /// (moea64_bootstrap_native). Done once, before anything else takes
    /// memory when the system calls it at boot. Its frames are marked in
    /// use for good: FreeBSD takes them out of phys_avail.
    pub(crate) fn bootstrap_hpt(&mut self, env: &mut PmapEnv) {
        if self.hpt.is_some() {
            return;
        }
        let count = pteg_count(env.phys.buddy.npages());
        let pages = count * PTEG_BYTES / 4096;
        let base = env
            .phys
            .buddy
            .alloc_contig(pages, pages)
            .unwrap_or_else(|| panic!("no contiguous, aligned {} KB for the hashed page table", count * PTEG_BYTES / 1024));
        for i in 0..pages as u32 {
            let f = Pfn(base.0 + i);
            env.mem.zero_frame(f);
            let m = env.phys.pages.get_mut(f);
            m.flags |= pflags::INUSE | pflags::PTPAGE | pflags::UNMANAGED;
        }
        self.hpt = Some(HptGeometry::new(base.addr().0, count));
    }

    /// The VSID of the segment holding `va` in `pm` (it must have one).
    pub(crate) fn vsid_of(&self, pm: PmapId, va: u64) -> u64 {
        *self.pm(pm).segs.get(&esid(va)).unwrap_or_else(|| panic!("pmap {pm}: no segment for {va:#x}"))
    }

    /// The entry for `pvo` at `va` (moea64_pte_from_pvo): PP from the
    /// protection, N unless executable, the WIMG bits, wired as a software
    /// bit, and for a superpage PVO L with the 16 MB frame.
    pub(crate) fn pte_from_pvo(vsid: u64, va: u64, pvo: &Pvo, hid: bool) -> Hpte {
        let mut lo = HpteLo::from_bits_truncate(pvo.wimg as u64);
        lo |= if pvo.prot & prot::WRITE != 0 { HpteLo::PP_RW } else { HpteLo::PP_RO };
        if pvo.prot & prot::EXEC == 0 {
            lo |= HpteLo::N;
        }
        let hi = if pvo.flags & super::pvof::WIRED != 0 { HpteHi::SW_WIRED } else { HpteHi::empty() };
        let pa = if pvo.large() { pvo.pa & !super::SP_MASK } else { pvo.pa };
        Hpte::new(vsid, va, pa, pvo.large(), hid, hi, lo)
    }

    fn read(mem: &PhysMem, pa: u64) -> Hpte {
        Hpte { hi: mem.read_u64(PhysAddr(pa)), lo: mem.read_u64(PhysAddr(pa + 8)) }
    }
    fn write(mem: &mut PhysMem, pa: u64, e: Hpte) {
        mem.write_u64(PhysAddr(pa + 8), e.lo);
        mem.write_u64(PhysAddr(pa), e.hi);
    }

    /// Writes `e` over the valid entry at `pa`, which translates the page
    /// at `va`.
    fn update(mem: &mut PhysMem, pa: u64, e: Hpte, va: u64) -> Invalidate {
        Self::write(mem, pa, e);
        Invalidate::new(va, 1 << BASE_SHIFT)
    }

    /// tlbie of a changed entry's page in address space `asid`: the
    /// hardware broadcasts it, so every CPU's TLB drops the translation,
    /// running the address space or not, with no IPI. The SLB (the model's
    /// walk cache) is not touched: tlbie leaves segments alone.
    pub(crate) fn tlbie(env: &mut PmapEnv, asid: u16, inv: Invalidate) {
        shootdown::broadcast(env, asid, |mmu, a| mmu.tlb.invalidate_page(inv.va, a));
        env.ev.invlpg += 1;
    }

    /// tlbie of a change to `pm`'s entry, or inside `batched_tlbie` only
    /// counted: the batch drops the translations of its whole range at
    /// its end.
    fn tlbie_in(&self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate) {
        if self.defer_tlbie {
            env.ev.invlpg += 1;
            inv.unneeded();
        } else {
            Self::tlbie(env, pm as u16, inv);
        }
    }

    /// Runs `f`, which takes the entries of the 16 MB range at `sva` in
    /// `pm` out of the HPT, counting a tlbie for each as it goes but
    /// applying them to the TLBs at once at the end: every CPU drops every
    /// translation of the address space inside the range. The same effect
    /// as one tlbie per page, without 4096 searches of every TLB.
    pub(crate) fn batched_tlbie<R>(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, f: impl FnOnce(&mut Self, &mut PmapEnv) -> R) -> R {
        debug_assert!(!self.defer_tlbie, "nested tlbie batches");
        self.defer_tlbie = true;
        let r = f(self, env);
        self.defer_tlbie = false;
        shootdown::broadcast(env, pm as u16, |mmu, a| mmu.tlb.invalidate_range(sva, sva + super::SP_SIZE, a));
        r
    }

    /// The slot of the first entry of PTEG `group` that `ok` accepts,
    /// starting at a random one (moea64_insert_to_pteg_native).
    fn pick(&mut self, mem: &PhysMem, group: u64, ok: impl Fn(Hpte) -> bool) -> Option<u64> {
        let start = self.mftb() % PTEG_ENTRIES;
        let g = self.geom();
        (0..PTEG_ENTRIES).map(|j| group * PTEG_ENTRIES + (start + j) % PTEG_ENTRIES).find(|&s| ok(Self::read(mem, g.slot_pa(s))))
    }

    /// A victim in PTEG `group`, from a random start: an entry that is not
    /// wired, not a 16 MB one unless `large_too`, and not referenced unless
    /// `referenced_too` (the old moea64_pte_spillable_ident preferred an
    /// entry with R clear; the current code keeps wired and large ones).
    fn victim(&mut self, mem: &PhysMem, group: u64, large_too: bool, referenced_too: bool) -> Option<u64> {
        let ok = |e: Hpte| e.valid() && !e.wired() && (large_too || !e.large()) && (referenced_too || !e.lo_flags().contains(HpteLo::R));
        self.pick(mem, group, ok)
    }

    /// Takes the entry in `slot` out of the table for another: its PVO
    /// learns it was evicted and keeps its R and C bits, and its
    /// translation leaves the TLBs.
    pub(crate) fn evict(&mut self, env: &mut PmapEnv, slot: u64) {
        let g = self.geom();
        let e = Self::read(env.mem, g.slot_pa(slot));
        let vsid = e.ava() >> 5;
        let (owner, esid) = *self.vsid_owner.get(&vsid).expect("an entry of a live address space");
        let va = (esid << SEGMENT_SHIFT) | (g.page_index(slot, e) << BASE_SHIFT);
        let pvo = self.pvo_mut(owner, va);
        debug_assert_eq!(pvo.slot as u64, slot, "evicted entry's PVO at {va:#x} is elsewhere");
        pvo.slot = NO_SLOT;
        pvo.refchg |= Self::rc_of(e);
        let inv = Self::update(env.mem, g.slot_pa(slot), Hpte::EMPTY, va);
        Self::tlbie(env, owner as u16, inv);
        self.st.pte_overflow += 1;
        self.st.evictions += 1;
        self.st.pte_valid -= 1;
    }

    fn rc_of(e: Hpte) -> u8 {
        let lo = e.lo_flags();
        (lo.contains(HpteLo::R) as u8 * rc::REF) | (lo.contains(HpteLo::C) as u8 * rc::CHG)
    }

    /// Inserts the entry of `pm`'s PVO at `va` (moea64_pte_insert_native):
    /// a free slot of the primary PTEG, else of the secondary (with H set),
    /// else the slot of an entry it evicts. Wired entries are never
    /// evicted, large ones only when nothing else can go.
    pub(crate) fn pte_insert(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) {
        let vsid = self.vsid_of(pm, va);
        let pvo = *self.pvo(pm, va).expect("PVO to insert");
        debug_assert!(!pvo.in_table(), "PVO at {va:#x} is in the table already");
        let groups = self.geom().groups(vsid, va, BASE_SHIFT);
        let mut slot = None;
        for (hid, g) in [false, true].into_iter().zip(groups) {
            if let Some(s) = self.pick(env.mem, g, |e| !e.valid()) {
                slot = Some((s, hid));
                break;
            }
        }
        // Both full: an unreferenced small entry of either PTEG, else any
        // small one, else (where FreeBSD would panic) a large one.
        let passes = [(false, false), (false, true), (true, true)];
        'evict: for (large_too, referenced_too) in passes {
            if slot.is_some() {
                break;
            }
            for (hid, g) in [false, true].into_iter().zip(groups) {
                if let Some(s) = self.victim(env.mem, g, large_too, referenced_too) {
                    self.evict(env, s);
                    slot = Some((s, hid));
                    break 'evict;
                }
            }
        }
        let (s, hid) = slot.unwrap_or_else(|| panic!("moea64_pte_insert: overflow: both PTEGs of {va:#x} hold only wired entries"));
        let e = Self::pte_from_pvo(vsid, va, &pvo, hid);
        Self::write(env.mem, self.geom().slot_pa(s), e);
        self.pvo_mut(pm, va).slot = s as u32;
        self.st.pte_valid += 1;
    }

    /// Removes the entry of `pm`'s PVO at `va` from the table
    /// (moea64_pte_unset_native) and the TLBs. Returns its R and C bits,
    /// or None if it had been evicted (FreeBSD's -1).
    pub(crate) fn pte_unset(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Option<u8> {
        let pvo = *self.pvo(pm, va).expect("PVO to unset");
        if !pvo.in_table() {
            return None;
        }
        let pa = self.geom().slot_pa(pvo.slot as u64);
        let e = Self::read(env.mem, pa);
        debug_assert!(e.valid() && e.matches(self.vsid_of(pm, va), va, 12), "slot of {va:#x} holds {e:?}");
        let inv = Self::update(env.mem, pa, Hpte::EMPTY, va);
        self.tlbie_in(env, pm, inv);
        self.pvo_mut(pm, va).slot = NO_SLOT;
        self.st.pte_valid -= 1;
        Some(Self::rc_of(e))
    }

    /// Rewrites the entry of `pm`'s PVO at `va` after the PVO changed
    /// (moea64_pte_replace_native with invalidation: unset, then insert).
    /// An evicted PVO stays out of the table (the next access faults it
    /// back in); returns the old entry's R and C bits, None if evicted.
    pub(crate) fn pte_replace(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Option<u8> {
        let bits = self.pte_unset(env, pm, va)?;
        self.pte_insert(env, pm, va);
        Some(bits)
    }

    /// An evicted PVO whose entry goes back into the table: the overflow
    /// count drops.
    pub(crate) fn pte_reinsert(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) {
        self.pte_insert(env, pm, va);
        self.st.pte_overflow -= 1;
    }

    /// R and C of the PVO's entry in the table now (moea64_pte_synch);
    /// 0 when it is not in the table.
    pub(crate) fn pte_bits(&self, mem: &PhysMem, pvo: &Pvo) -> u8 {
        match self.hpt {
            Some(g) if pvo.in_table() => Self::rc_of(Self::read(mem, g.slot_pa(pvo.slot as u64))),
            _ => 0,
        }
    }

    /// Clears `bit` (R or C) in the entry of `pm`'s PVO at `va`
    /// (moea64_pte_clear_native): R in place, C by taking the entry out
    /// and inserting it again (which loses R too, as in moea64). Either
    /// way the translation leaves the TLBs, so the next access, or store,
    /// is recorded again. Returns the entry's R and C bits before, or None
    /// if it had been evicted.
    pub(crate) fn pte_clear(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, bit: u8) -> Option<u8> {
        let pvo = *self.pvo(pm, va).expect("PVO to clear");
        if !pvo.in_table() {
            return None;
        }
        if bit & rc::CHG != 0 {
            return self.pte_replace(env, pm, va);
        }
        let pa = self.geom().slot_pa(pvo.slot as u64);
        let e = Self::read(env.mem, pa);
        debug_assert!(e.valid() && e.matches(self.vsid_of(pm, va), va, 12), "slot of {va:#x} holds {e:?}");
        let inv = Self::update(env.mem, pa, Hpte { hi: e.hi, lo: e.lo & !HpteLo::R.bits() }, va);
        self.tlbie_in(env, pm, inv);
        Some(Self::rc_of(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FreeBSD's sizes: 8 GiB (2^21 pages) gets 2^20 PTEGs (128 MB);
    /// small machines get the ISA's minimum.
    #[test]
    fn hpt_size_follows_memory() {
        assert_eq!(pteg_count(1 << 21), 1 << 20);
        assert_eq!(pteg_count((1 << 21) + 1), 1 << 21);
        assert_eq!(pteg_count(65536), 32768);
        assert_eq!(pteg_count(4096), MIN_PTEGS);
        assert_eq!(pteg_count(100), MIN_PTEGS);
    }
}
