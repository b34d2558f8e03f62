//! Direct tests of the riscv pmap: promotion and its failure reasons,
//! demotion with and without a stashed L3 table, whole-superpage removal,
//! 1 GB mappings, accessed/dirty maintenance by pmap_fault, Sv48, and TLB
//! fences to every CPU running the address space.

use super::*;
use splab_hw::VirtAddr;
use splab_vm::pmap::{Advice, Pmap};
use crate::testrig::{rw_access, Rig};
use splab_hw::mmu::{perm, Translation};
use splab_hw::riscv::{L3_SHIFT, LN_ENTRIES};
use splab_vm::page::pflags;

/// A 1 GB-aligned user address well inside Sv39's 256 GiB.
const VA: u64 = 0x10_0000_0000;

fn rig(npages: u64) -> Rig<PmapRiscv> {
    Rig::new(PmapRiscv::new(Mode::Sv39, npages, true), npages)
}

fn read_access() -> EnterFlags {
    EnterFlags { access: prot::READ, ..Default::default() }
}

/// The leaf mapping `va`.
fn leaf(r: &Rig<PmapRiscv>, pm: PmapId, va: u64) -> (Pte, u32) {
    let (e, shift, _) = r.pmap.0.find_leaf(&r.mem, pm, va).expect("mapped");
    (e, shift)
}

#[test]
fn full_dirty_run_promotes_with_one_pv_entry() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.l2.promotions"), 1);
    let m = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 5 * 4096 + 8)).unwrap();
    assert_eq!((m.shift, m.pa.0), (21, pages[5].addr().0 + 8));
    let (e, _) = leaf(&r, pm, VA);
    assert!(e.has(PteFlags::V | PteFlags::R | PteFlags::W | PteFlags::U | PteFlags::A | PteFlags::D | PteFlags::SW_MANAGED));
    assert_eq!(r.pmap.0.pv.live(), 1, "512 PV entries became one");
    assert_eq!(r.ev.promotions, 1);
    r.check();
}

#[test]
fn promotion_fails_on_mixed_dirty_state_and_write_protects_clean_pages() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // Page 100 is only read: accessed but clean.
    r.enter_all(pm, VA, &pages, |i| if i == 100 { read_access() } else { rw_access() });
    assert_eq!(r.stat("vm.pmap.l2.promotions"), 0);
    assert_eq!(r.stat("vm.pmap.l2.p_failures"), 1);
    assert_eq!(r.stat("splab.pmap.l2.p_failures.attributes"), 1);
    let m = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 100 * 4096)).unwrap();
    assert_eq!(m.prot & prot::WRITE, 0, "the clean page lost write access so its first write is seen");
    r.check();
}

#[test]
fn promotion_needs_contiguous_frames() {
    let mut r = rig(4096);
    let mut pages = r.superpage_run();
    let pm = r.pinit();
    pages.swap(3, 4);
    r.enter_all(pm, VA, &pages, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.l2.promotions"), 0);
    assert_eq!(r.stat("splab.pmap.l2.p_failures.not_contiguous"), 1);
    r.check();
}

#[test]
fn promotion_needs_the_same_accessed_state_and_unaccessed_superpages_are_not_demoted() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // The first page is entered without an access (a speculative mapping).
    r.enter_all(pm, VA, &pages, |i| if i == 0 { EnterFlags::default() } else { rw_access() });
    assert_eq!(r.stat("splab.pmap.l2.p_failures.attributes"), 1);
    let (p, mut env) = r.env();
    p.remove(&mut env, pm, VirtAddr(VA), VirtAddr(VA + L2_SIZE));
    // All 512 speculative: they promote, to a 2 MB leaf with A clear.
    r.enter_all(pm, VA, &pages, |_| EnterFlags::default());
    assert_eq!(r.stat("vm.pmap.l2.promotions"), 1);
    let (e, shift) = leaf(&r, pm, VA);
    assert_eq!(shift, 21);
    assert!(!e.has(PteFlags::A));
    // Such a mapping is destroyed rather than demoted (pmap_demote_l2).
    let (p, mut env) = r.env();
    p.protect(&mut env, pm, VirtAddr(VA), VirtAddr(VA + 4096), prot::READ);
    assert_eq!((r.stat("vm.pmap.l2.demotions"), r.stat("splab.pmap.l2.demotion_aborts")), (0, 1));
    assert!(r.pmap.extract(&r.mem, pm, VirtAddr(VA + 8192)).is_none());
    assert_eq!(r.pmap.0.pv.live(), 0);
    r.check();
}

#[test]
fn demotion_reuses_the_stashed_page_table_page() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    let allocs = r.ev.pt_page_allocs;
    let (p, mut env) = r.env();
    p.protect(&mut env, pm, VirtAddr(VA + 4096), VirtAddr(VA + 3 * 4096), prot::READ);
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 1);
    assert_eq!(r.stat("splab.pmap.l2.demotion_ptp_reused"), 1);
    assert_eq!(r.ev.pt_page_allocs, allocs, "no page-table page allocated");
    let ro = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 4096)).unwrap();
    let rw = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 3 * 4096)).unwrap();
    assert_eq!((ro.shift, ro.prot & prot::WRITE, rw.prot & prot::WRITE), (12, 0, prot::WRITE));
    assert!(!ro.dirty && rw.dirty, "write protection clears D with W");
    assert!(r.phys.pages.get(pages[1]).has(pflags::DIRTY), "the modified state went to the page");
    assert_eq!(r.pmap.0.pv.live(), 512);
    r.check();
}

#[test]
fn direct_mapping_demotion_without_memory_removes_the_mapping() {
    let mut r = rig(2048);
    let pages = r.superpage_run();
    let pm = r.pinit();
    let (p, mut env) = r.env();
    p.enter(&mut env, pm, VirtAddr(VA), pages[0], prot::RW, EnterFlags { access: prot::RW, psind: Psind::new(1), ..Default::default() }).unwrap();
    assert_eq!(r.stat("vm.pmap.l2.mappings"), 1);
    assert_eq!(leaf(&r, pm, VA).1, 21);
    // Use up every free page, so demotion cannot get a page-table page.
    while r.phys.alloc_noobj().is_some() {}
    let (p, mut env) = r.env();
    p.protect(&mut env, pm, VirtAddr(VA), VirtAddr(VA + 4096), prot::READ);
    assert_eq!(r.stat("splab.pmap.l2.demotion_aborts"), 1);
    assert!(r.pmap.extract(&r.mem, pm, VirtAddr(VA + 8192)).is_none(), "the 2MB mapping is gone, to be refaulted");
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
    let (p, mut env) = r.env();
    assert_eq!(p.enter(&mut env, pm, VirtAddr(VA), pages[0], prot::RW, rw_access()), Err(PmapError::NoMemory));
    let root = r.pmap.0.root_table(pm);
    assert!((0..LN_ENTRIES).all(|i| r.mem.read_u64(PhysAddr(root + i * 8)) == 0), "the L2 table was unlinked");
    assert_eq!(r.phys.alloc_noobj().map(|_| ()), Some(()), "and freed");
    r.check();
}

#[test]
fn removing_a_whole_superpage_does_not_demote_and_frees_every_table() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let free0 = r.phys.buddy.free_count();
    let pm = r.pinit();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    let (p, mut env) = r.env();
    p.remove(&mut env, pm, VirtAddr(VA), VirtAddr(VA + L2_SIZE));
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 0);
    assert_eq!(r.pmap.0.pv.live(), 0);
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::DIRTY | pflags::REFERENCED)), "state handed to all 512 pages");
    // The stashed L3 table and the L2 table are freed; the root remains.
    assert_eq!(r.phys.buddy.free_count(), free0 - 1);
    r.check();
}

#[test]
fn unmapping_part_of_a_superpage_demotes_it() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    let (p, mut env) = r.env();
    p.remove(&mut env, pm, VirtAddr(VA + 7 * 4096), VirtAddr(VA + 9 * 4096));
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 1);
    assert!(r.pmap.extract(&r.mem, pm, VirtAddr(VA + 8 * 4096)).is_none());
    assert_eq!(r.pmap.extract(&r.mem, pm, VirtAddr(VA + 9 * 4096)).unwrap().shift, 12);
    assert_eq!(r.pmap.0.pv.live(), 510);
    r.check();
}

#[test]
fn one_gigabyte_mapping_demotes_in_two_steps() {
    let mut r = rig(1 << 19); // 2 GiB
    let base = r.phys.buddy.alloc_contig(1 << 18, 1 << 18).unwrap();
    for i in 0..1u32 << 18 {
        r.phys.pages.get_mut(Pfn(base.0 + i)).flags = pflags::INUSE | pflags::UNMANAGED | pflags::LARGEPAGE;
    }
    let pm = r.pinit();
    let (p, mut env) = r.env();
    p.enter(&mut env, pm, VirtAddr(VA), base, prot::RW, EnterFlags { access: prot::READ, psind: Psind::new(2), ..Default::default() }).unwrap();
    let (e, shift) = leaf(&r, pm, VA + 12345);
    assert_eq!(shift, 30);
    assert!(e.has(PteFlags::D) && !e.has(PteFlags::SW_MANAGED), "unmanaged writable mappings are entered dirty");
    let (p, mut env) = r.env();
    p.remove(&mut env, pm, VirtAddr(VA + (5 << 21) + 4096), VirtAddr(VA + (5 << 21) + 8192));
    assert_eq!(r.stat("splab.pmap.l1.demotions"), 1);
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 1);
    assert!(r.pmap.extract(&r.mem, pm, VirtAddr(VA + (5 << 21) + 4096)).is_none());
    assert_eq!(r.pmap.extract(&r.mem, pm, VirtAddr(VA + (6 << 21))).unwrap().shift, 21);
    assert_eq!(r.pmap.extract(&r.mem, pm, VirtAddr(VA + (5 << 21))).unwrap().shift, 12);
    r.check();
    let (p, mut env) = r.env();
    p.remove(&mut env, pm, VirtAddr(VA), VirtAddr(VA + L1_SIZE));
    assert_eq!(r.pmap.0.pm(pm).resident, 0);
    r.check();
}

#[test]
fn pmap_fault_sets_accessed_and_dirty_and_refuses_what_vm_fault_must_handle() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // A writable page entered for a read: A set, D clear.
    let (p, mut env) = r.env();
    p.enter(&mut env, pm, VirtAddr(VA), pages[0], prot::RW, read_access()).unwrap();
    // A read-only page entered speculatively: A clear.
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm, VirtAddr(VA + 4096), VirtAddr(VA + 8192), &|_| Some(pages[1]), prot::RW);
    assert!(!leaf(&r, pm, VA + 4096).0.has(PteFlags::A | PteFlags::W));
    let (p, mut env) = r.env();
    assert!(p.fault(&mut env, pm, VirtAddr(VA), prot::WRITE), "a store to a clean writable page sets D");
    assert!(leaf(&r, pm, VA).0.has(PteFlags::A | PteFlags::D));
    let (p, mut env) = r.env();
    assert!(p.fault(&mut env, pm, VirtAddr(VA + 4096), prot::READ), "a load through A = 0 sets A");
    assert!(leaf(&r, pm, VA + 4096).0.has(PteFlags::A));
    let (p, mut env) = r.env();
    assert!(!p.fault(&mut env, pm, VirtAddr(VA + 4096), prot::WRITE), "a store to a read-only page is vm_fault's");
    assert!(!p.fault(&mut env, pm, VirtAddr(VA + 8192), prot::READ), "so is an unmapped page");
    assert!(!p.fault(&mut env, pm, VirtAddr(VA), prot::EXEC), "and a fetch from a page without X");
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
    let (p, mut env) = r.env();
    assert!(!p.fault(&mut env, pm, VirtAddr(VA + 4096), prot::WRITE), "the first write goes to vm_fault");
    assert!(p.fault(&mut env, pm, VirtAddr(VA + 4096), prot::READ));
    r.check();
}

#[test]
fn removal_fences_every_cpu_running_the_space_and_a_switch_flushes() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    let (p, mut env) = r.env();
    p.activate(&mut env, pm, 0);
    p.activate(&mut env, pm, 1);
    r.enter_all(pm, VA, &pages[..1], |_| rw_access());
    let t = Translation { pa_base: pages[0].addr().0, shift: 12, perm: perm::READ | perm::USER };
    for c in &mut r.mmu {
        c.tlb.fill(VA, ASID, t);
    }
    let (p, mut env) = r.env();
    p.remove(&mut env, pm, VirtAddr(VA), VirtAddr(VA + 4096));
    for c in &mut r.mmu {
        assert!(c.tlb.lookup(VA, ASID).is_none(), "stale entry left on a CPU");
    }
    assert_eq!(r.ev.shootdown_ipis, 2, "one remote fence for the page, one for the range");
    // No ASIDs: switching address spaces flushes the CPU's TLB.
    let other = r.pinit();
    r.mmu[1].tlb.fill(VA, ASID, t);
    let (p, mut env) = r.env();
    p.activate(&mut env, other, 1);
    assert!(r.mmu[1].tlb.lookup(VA, ASID).is_none());
    assert_eq!(r.pmap.asid(pm), r.pmap.asid(other));
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
    let pages = r.superpage_run();
    let pm = r.pinit();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    let (p, mut env) = r.env();
    p.advise(&mut env, pm, VirtAddr(VA), VirtAddr(VA + 16 * 4096), Advice::DontNeed);
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 1);
    assert!(r.pmap.extract(&r.mem, pm, VirtAddr(VA + 15 * 4096)).is_none(), "the last page of the range was unmapped");
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
    let pages = r.superpage_run();
    let pm = r.pinit();
    r.enter_all(pm, VA, &pages[..2], |_| rw_access());
    let (p, mut env) = r.env();
    assert!(p.0.pv.remove(&mut env, pages[1], pm, VA + 4096));
    let (p, env) = r.env();
    let e = p.check(&env).unwrap_err();
    assert!(e.contains("no PV entry"), "{e}");
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
    let (p, mut env) = r.env();
    p.remove(&mut env, pm, VirtAddr(va), VirtAddr(va + L2_SIZE));
    assert_eq!(r.phys.buddy.free_count(), free0 - 1, "only the root remains");
    r.check();
}

/// Entering a 4 KB page under a 2 MB mapping that was never accessed
/// removes that mapping (the only entry of its L2 table, which goes too)
/// and maps the page from fresh tables.
#[test]
fn entering_under_an_unaccessed_superpage_that_was_alone_in_its_table() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    let lookup = |v: VirtAddr| (v.0 >= VA && v.0 < VA + L2_SIZE).then(|| pages[((v.0 - VA) / 4096) as usize]);
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm, VirtAddr(VA), VirtAddr(VA + L2_SIZE), &lookup, prot::RW);
    let (p, mut env) = r.env();
    p.enter(&mut env, pm, VirtAddr(VA + 4096), pages[1], prot::RW, rw_access()).unwrap();
    assert_eq!(r.stat("splab.pmap.l2.demotion_aborts"), 1);
    assert_eq!(r.pmap.extract(&r.mem, pm, VirtAddr(VA + 4096)).map(|m| (m.pa, m.shift)), Some((pages[1].addr(), 12)));
    r.check();
}

/// A 2 MB run mapped at VA, every page written, and promoted.
fn promoted_dirty(r: &mut Rig<PmapRiscv>) -> (Vec<Pfn>, PmapId) {
    let pages = r.superpage_run();
    let pm = r.pinit();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.l2.promotions"), 1);
    (pages, pm)
}

/// pmap_clear_modify on one page of a dirty 2 MB mapping demotes it and
/// leaves that page read-only and clean; the others keep W and D.
#[test]
fn clear_modify_demotes_a_dirty_superpage_and_write_protects_the_page() {
    let mut r = rig(4096);
    let (pages, pm) = promoted_dirty(&mut r);
    let (p, mut env) = r.env();
    assert!(p.is_modified(&env, pages[5]));
    p.clear_modify(&mut env, pages[5]);
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 1);
    let m5 = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 5 * 4096)).unwrap();
    let m6 = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 6 * 4096)).unwrap();
    assert_eq!((m5.shift, m5.prot & prot::WRITE, m5.dirty), (12, 0, false));
    assert_eq!((m6.shift, m6.prot & prot::WRITE, m6.dirty), (12, prot::WRITE, true));
    let (p, mut env) = r.env();
    assert!(!p.is_modified(&env, pages[5]) && p.is_modified(&env, pages[6]));
    // A 4 KB mapping keeps W and loses D only.
    p.clear_modify(&mut env, pages[6]);
    let (e, _) = leaf(&r, pm, VA + 6 * 4096);
    assert!(e.has(PteFlags::W) && !e.has(PteFlags::D));
    r.check();
}

/// pmap_ts_referenced on a 2 MB mapping: each page counts its reference;
/// only the page the hash selects clears A, for all.
#[test]
fn ts_referenced_counts_a_superpage_for_each_page_and_clears_it_once() {
    let mut r = rig(4096);
    let (pages, pm) = promoted_dirty(&mut r);
    let selected: Vec<usize> = (0..512).filter(|&i| crate::refbits::selected_for_clearing(pages[i], pm, VA, L2_SHIFT, LN_ENTRIES)).collect();
    assert_eq!(selected.len(), 1);
    let (k, other) = (selected[0], (selected[0] + 1) % 512);
    let (p, mut env) = r.env();
    assert_eq!(p.ts_referenced(&mut env, pages[other]), 1);
    assert!(p.is_referenced(&env, pages[k]));
    assert_eq!(p.ts_referenced(&mut env, pages[k]), 1);
    assert!(!p.is_referenced(&env, pages[other]));
    assert_eq!(p.ts_referenced(&mut env, pages[other]), 0);
    assert!(r.phys.pages.get(pages[other]).has(pflags::DIRTY));
    // Without Svadu the next access faults and pmap_fault sets A again.
    let (p, mut env) = r.env();
    assert!(p.fault(&mut env, pm, VirtAddr(VA + 8), prot::READ));
    assert!(p.is_referenced(&env, pages[0]));
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 0);
    r.check();
}

/// Dropping a 2 MB run whole: its 2 MB mapping goes without demotion, and
/// so do other address spaces' 4 KB mappings of its pages.
#[test]
fn remove_all_superpage_drops_every_mapping_without_demoting() {
    let mut r = rig(4096);
    let (pages, a) = promoted_dirty(&mut r);
    let b = r.pinit();
    let (p, mut env) = r.env();
    p.enter(&mut env, b, VirtAddr(VA + 7 * 4096), pages[7], prot::READ, read_access()).unwrap();
    p.remove_all_superpage(&mut env, pages[300]);
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 0);
    assert_eq!(r.pmap.0.pv.live(), 0);
    assert!(r.pmap.extract(&r.mem, a, VirtAddr(VA)).is_none());
    assert!(r.pmap.extract(&r.mem, b, VirtAddr(VA + 7 * 4096)).is_none());
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::DIRTY | pflags::REFERENCED)));
    r.check();
}
