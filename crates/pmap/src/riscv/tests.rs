//! Direct tests of what only the riscv pmap does: its PTE format at every
//! level, accessed/dirty maintenance by pmap_fault, pruning tables after a
//! failed allocation, Sv48, and TLB fences to every CPU running the
//! address space. What it does as amd64's pmap does is tested on both in
//! `crate::pte`'s tests.

use super::*;
use splab_hw::VirtAddr;
use splab_vm::pmap::{Advice, Pmap};
use crate::testrig::{read_access, rw_access, user_read_4k, Rig};
use splab_hw::riscv::{L3_SHIFT, LN_ENTRIES};
use splab_vm::page::pflags;

/// A 1 GB-aligned user address well inside Sv39's 256 GiB.
const VA: u64 = 0x10_0000_0000;

fn rig(npages: u64) -> Rig<PmapRiscv> {
    Rig::new(PmapRiscv::new(Mode::Sv39, npages, true), npages)
}

/// The leaf mapping `va`.
fn leaf(r: &Rig<PmapRiscv>, pm: PmapId, va: u64) -> (Pte, u32) {
    let (e, shift, _) = r.pmap.0.find_leaf(&r.mem, pm, va).expect("mapped");
    (e, shift)
}

#[test]
fn promotion_needs_the_same_accessed_state_and_unaccessed_superpages_are_not_demoted() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // The first page is entered without an access (a speculative mapping).
    r.enter_all(pm, VA, &pages, |i| if i == 0 { EnterFlags::default() } else { rw_access() });
    assert_eq!(r.stat("splab.pmap.l2.p_failures.attributes"), 1);
    r.remove(pm, VA, VA + L2_SIZE);
    // All 512 speculative: they promote, to a 2 MB leaf with A clear.
    r.enter_all(pm, VA, &pages, |_| EnterFlags::default());
    assert_eq!(r.stat("vm.pmap.l2.promotions"), 1);
    let (e, shift) = leaf(&r, pm, VA);
    assert_eq!(shift, 21);
    assert!(!e.has(PteFlags::A));
    // Such a mapping is destroyed rather than demoted (pmap_demote_l2).
    r.protect(pm, VA, VA + 4096, prot::READ);
    assert_eq!((r.stat("vm.pmap.l2.demotions"), r.stat("splab.pmap.l2.demotion_aborts")), (0, 1));
    assert!(r.extract(pm, VA + 8192).is_none());
    assert_eq!(r.pmap.0.pv.live(), 0);
    r.check();
}

#[test]
fn failed_allocation_leaves_no_empty_table_behind() {
    let mut r = rig(2048);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // Room for the L2 table but not for the L3 table.
    let mut held = Vec::new();
    while let Some(p) = r.phys.alloc_noobj() {
        held.push(p);
    }
    r.phys.free_page(held.pop().unwrap());
    assert_eq!(r.enter(pm, VA, pages[0], prot::RW, rw_access()), Err(PmapError::NoMemory));
    let root = r.pmap.0.root_table(pm);
    assert!((0..LN_ENTRIES).all(|i| r.mem.read_u64(PhysAddr(root + i * 8)) == 0), "the L2 table was unlinked");
    assert_eq!(r.phys.alloc_noobj().map(|_| ()), Some(()), "and freed");
    r.check();
}

#[test]
fn pmap_fault_sets_accessed_and_dirty_and_refuses_what_vm_fault_must_handle() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // A writable page entered for a read: A set, D clear.
    r.enter(pm, VA, pages[0], prot::RW, read_access()).unwrap();
    // A read-only page entered speculatively: A clear.
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm, VirtAddr(VA + 4096), VirtAddr(VA + 8192), &|_| Some(pages[1]), prot::RW);
    assert!(!leaf(&r, pm, VA + 4096).0.has(PteFlags::A | PteFlags::W));
    assert!(r.fault(pm, VA, prot::WRITE), "a store to a clean writable page sets D");
    assert!(leaf(&r, pm, VA).0.has(PteFlags::A | PteFlags::D));
    assert!(r.fault(pm, VA + 4096, prot::READ), "a load through A = 0 sets A");
    assert!(leaf(&r, pm, VA + 4096).0.has(PteFlags::A));
    assert!(!r.fault(pm, VA + 4096, prot::WRITE), "a store to a read-only page is vm_fault's");
    assert!(!r.fault(pm, VA + 8192, prot::READ), "so is an unmapped page");
    assert!(!r.fault(pm, VA, prot::EXEC), "and a fetch from a page without X");
    assert_eq!(r.stat("splab.pmap.ad_faults"), 2);
    r.check();
}

#[test]
fn pmap_fault_marks_a_superpage_dirty_in_one_step() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // 512 read faults on writable pages: all clean, so all write-protected
    // by promotion, which then succeeds with a read-only superpage.
    r.enter_all(pm, VA, &pages, |_| read_access());
    assert_eq!(r.stat("vm.pmap.l2.promotions"), 1);
    let (e, shift) = leaf(&r, pm, VA);
    assert_eq!((shift, e.has(PteFlags::W)), (21, false));
    assert!(!r.fault(pm, VA + 4096, prot::WRITE), "the first write goes to vm_fault");
    assert!(r.fault(pm, VA + 4096, prot::READ));
    r.check();
}

#[test]
fn removal_fences_every_cpu_running_the_space_and_a_switch_flushes() {
    let mut r = rig(4096);
    let (pages, pm) = r.mapped_on_both_cpus(VA, 1);
    let t = user_read_4k(pages[0]);
    r.fill_tlbs(VA, ASID, t);
    r.remove(pm, VA, VA + 4096);
    assert!(!r.tlb_holds(VA, ASID), "stale entry left on a CPU");
    assert_eq!(r.ev.shootdown_ipis, 2, "one remote fence for the page, one for the range");
    // No ASIDs: switching address spaces flushes the CPU's TLB.
    r.assert_switch_flushes(pm, VA, ASID, t);
}

#[test]
fn enter_object_maps_a_populated_run_with_one_unaccessed_leaf() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    let base = VA - 4096;
    let lookup = |v: VirtAddr| (v.0 >= VA && v.0 < VA + L2_SIZE).then(|| pages[((v.0 - VA) / 4096) as usize]);
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm, VirtAddr(base), VirtAddr(VA + L2_SIZE), &lookup, prot::RW);
    let (e, shift) = leaf(&r, pm, VA + 4096);
    assert_eq!(shift, 21);
    assert!(!e.has(PteFlags::W) && !e.has(PteFlags::A), "read-only and speculative");
    assert_eq!(r.stat("vm.pmap.l2.mappings"), 1);
    // Again: the 2 MB mapping is left alone.
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm, VirtAddr(VA), VirtAddr(VA + L2_SIZE), &lookup, prot::RW);
    assert_eq!(r.stat("vm.pmap.l2.mappings"), 1);
    r.check();
}

#[test]
fn advise_clears_accessed_and_dirty_and_leaves_a_hole_for_repromotion() {
    let mut r = rig(4096);
    let (pages, pm) = r.mapped_run(VA, |_| rw_access());
    r.advise(pm, VA, VA + 16 * 4096, Advice::DontNeed);
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 1);
    assert!(r.extract(pm, VA + 15 * 4096).is_none(), "the last page of the range was unmapped");
    let (e, shift) = leaf(&r, pm, VA + 3 * 4096);
    assert_eq!(shift, L3_SHIFT);
    assert!(e.has(PteFlags::W) && !e.has(PteFlags::A) && !e.has(PteFlags::D));
    assert!(r.phys.pages.get(pages[3]).has(pflags::DIRTY), "DONTNEED hands the modified state to the page");
    assert!(leaf(&r, pm, VA + 20 * 4096).0.has(PteFlags::A | PteFlags::D), "outside the range: untouched");
    r.check();
}

#[test]
fn check_finds_a_mapping_without_a_pv_entry() {
    let mut r = rig(4096);
    let (pages, pm) = r.mapped_first(VA, 2, |_| rw_access());
    r.assert_check_finds("no PV entry", |p, env| assert!(p.0.pv.remove(env, pages[1], pm, VA + 4096)));
}

#[test]
fn sv48_promotes_and_frees_its_four_levels() {
    let mut r = Rig::new(PmapRiscv::new(Mode::Sv48, 4096, true), 4096);
    let pages = r.superpage_run();
    let free0 = r.phys.buddy.free_count();
    let pm = r.pinit();
    // Above Sv39's range: only Sv48 can map it.
    let va = 0x7f00_0000_0000u64;
    assert!(va < r.pmap.max_user_address());
    r.enter_all(pm, va, &pages, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.l2.promotions"), 1);
    assert_eq!(r.stat("vm.pmap.mode"), 1);
    assert_eq!(r.pmap.arch(), "riscv-sv48");
    // Root, L1, L2 and the stashed L3 table.
    assert_eq!(r.phys.buddy.free_count(), free0 - 4);
    r.check();
    r.remove(pm, va, va + L2_SIZE);
    assert_eq!(r.phys.buddy.free_count(), free0 - 1, "only the root remains");
    r.check();
}

/// A leaf has the same format at every level: the 2 MB leaf of a
/// promoted dirty run is its first PTE, bits and all.
#[test]
fn a_promoted_leaf_keeps_the_bits_of_its_pages() {
    let mut r = rig(4096);
    let (_, pm) = r.mapped_run(VA, |_| rw_access());
    let (e, shift) = leaf(&r, pm, VA);
    assert_eq!(shift, 21);
    assert!(e.has(PteFlags::V | PteFlags::R | PteFlags::W | PteFlags::U | PteFlags::A | PteFlags::D | PteFlags::SW_MANAGED));
}

/// Unmanaged writable mappings are entered dirty: nobody tracks their
/// modified state, and a store must not fault for it.
#[test]
fn unmanaged_writable_mappings_are_entered_dirty() {
    let mut r = rig(1 << 19); // 2 GiB
    let base = r.large_page_memory();
    let pm = r.pinit();
    r.enter_psind(pm, VA, base, prot::RW, prot::READ, Psind::new(2)).unwrap();
    let (e, shift) = leaf(&r, pm, VA + 12345);
    assert_eq!(shift, 30);
    assert!(e.has(PteFlags::D) && !e.has(PteFlags::SW_MANAGED));
    r.remove(pm, VA, VA + L1_SIZE);
    assert_eq!(r.pmap.0.pm(pm).resident, 0);
    r.check();
}

/// Without Svadu, a superpage whose A bit pmap_ts_referenced cleared is
/// referenced again through pmap_fault on its next access.
#[test]
fn pmap_fault_sets_a_cleared_accessed_bit_again() {
    let mut r = rig(4096);
    let (pages, pm) = r.mapped_run(VA, |_| rw_access());
    let k = (0..512).find(|&i| crate::refbits::selected_for_clearing(pages[i], pm, VA, L2_SHIFT, LN_ENTRIES)).unwrap();
    assert_eq!(r.ts_referenced(pages[k]), 1);
    assert!(!r.is_referenced(pages[0]));
    assert!(r.fault(pm, VA + 8, prot::READ));
    assert!(r.is_referenced(pages[0]));
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 0);
    r.check();
}

