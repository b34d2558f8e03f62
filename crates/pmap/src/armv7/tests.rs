//! Direct tests of the armv7 pmap: section promotion and its failure
//! reasons, demotion with and without the kept L2 table, direct sections,
//! one-step removal, the 64 KB level, access flag and modified-bit
//! emulation, the pages never promoted, and TLB maintenance. Where it
//! matters, the hardware walker reads the tables the pmap wrote.

use super::*;
use splab_hw::VirtAddr;
use splab_vm::pmap::{Advice, Pmap};
use crate::testrig::{rw_access, user_read_4k, Rig};
use splab_hw::armv7::pte::{L1Kind, SectionFlags};
use splab_hw::armv7::Armv7Walker;
use splab_hw::mmu::{perm, Access, Translation, WalkFault, WalkRefs, WalkReq, Walker};
use splab_hw::pwc::Pwc;

/// A 4 MB-aligned user address.
const VA: u64 = 0x4000_0000;

fn rig(npages: u64) -> Rig<PmapArmv7> {
    Rig::with_reservations(PmapArmv7::new(npages, true).unwrap(), npages, 8, 20)
}

/// A rig with the 64 KB level on.
fn rig_lp(npages: u64) -> Rig<PmapArmv7> {
    let mut r = rig(npages);
    r.pmap.set_tunable("vm.pmap.lp_enabled", 1).unwrap();
    r
}

/// A rig with large pages enabled and a new address space with 16 pages
/// mapped read/write at VA, each entered with a read/write access (which
/// promotes them to a 64 KB large page): its pages and the address space.
fn large_page_mapped() -> (Rig<PmapArmv7>, Vec<Pfn>, PmapId) {
    let mut r = rig_lp(2048);
    let pm = r.pinit();
    let pages: Vec<Pfn> = (0..16).map(|i| r.page(i)).collect();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    (r, pages, pm)
}

fn read_access() -> EnterFlags {
    EnterFlags { access: prot::READ, ..Default::default() }
}

/// The descriptor mapping `va`, in the small-page layout, and the size it maps.
fn leaf(r: &Rig<PmapArmv7>, pm: PmapId, va: u64) -> (SmallFlags, u8) {
    match r.pmap.0.find(&r.mem, pm, va).expect("mapped") {
        Leaf::Section(_, e) => (SmallFlags::from_section(e.flags()), 20),
        Leaf::Pte2(_, e) => (e.attrs(), if e.is_large() { 16 } else { 12 }),
    }
}

/// What the hardware walk gives for a user `access` to `va`.
fn hw_walk(r: &mut Rig<PmapArmv7>, pm: PmapId, va: u64, access: Access) -> Result<Translation, WalkFault> {
    let root = r.pmap.root(pm);
    let mut pwc = Pwc::new(&[]);
    Armv7Walker::freebsd().walk(&mut r.mem, &mut pwc, WalkReq::new(root, 0, VirtAddr(va), access), &mut WalkRefs::default())
}

fn enter(r: &mut Rig<PmapArmv7>, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
    r.enter(pm, va, m, pr, flags)
}

#[test]
fn full_modified_run_promotes_to_a_section_with_one_pv_entry() {
    let mut r = rig(2048);
    let pages = r.superpage_run();
    assert_eq!(pages.len(), 256, "1 MB reservations");
    let pm = r.pinit();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.section.promotions"), 1);
    assert_eq!(r.ev.promotions, 1);
    let m = r.extract(pm, VA + 5 * 4096 + 8).unwrap();
    assert_eq!((m.shift, m.pa.0, m.prot), (20, pages[5].addr_4k().0 + 8, prot::RW));
    assert_eq!(r.pmap.0.pv.live(), 1, "256 PV entries became one");
    // The L2 table stays, full, under the section.
    assert_eq!(r.pmap.0.pm(pm).pt2_count[l1_index(VA) as usize], 256);
    // The hardware sees one writable, non-global section.
    let t = hw_walk(&mut r, pm, VA + 0x4_5678, Access::Write).unwrap();
    assert_eq!((t.shift, t.pa(VA + 0x4_5678).0), (20, pages[0x45].addr_4k().0 + 0x678));
    assert_eq!(t.perm & perm::GLOBAL, 0);
    r.check();
}

#[test]
fn promotion_failures_are_counted_by_reason() {
    // The first entry maps the second page of the frame.
    let mut r = rig(2048);
    let mut pages = r.superpage_run();
    let pm = r.pinit();
    pages.swap(0, 1);
    r.enter_all(pm, VA, &pages, |_| rw_access());
    assert_eq!(r.stat("splab.pmap.section.p_failures.first"), 1);
    r.check();

    // Two pages swapped in the middle.
    let mut r = rig(2048);
    let mut pages = r.superpage_run();
    let pm = r.pinit();
    pages.swap(3, 4);
    r.enter_all(pm, VA, &pages, |_| rw_access());
    assert_eq!(r.stat("splab.pmap.section.p_failures.not_contiguous"), 1);
    assert_eq!(r.stat("vm.pmap.section.promotions"), 0);
    r.check();
}

#[test]
fn a_clean_writable_page_is_write_protected_and_fails_promotion_on_attributes() {
    let mut r = rig(2048);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // Page 100 is only read: referenced, writable, not modified.
    r.enter_all(pm, VA, &pages, |i| if i == 100 { read_access() } else { rw_access() });
    assert_eq!(r.stat("vm.pmap.section.p_failures"), 1);
    assert_eq!(r.stat("splab.pmap.section.p_failures.attributes"), 1);
    let (f, _) = leaf(&r, pm, VA + 100 * 4096);
    assert!(f.contains(PTE2_RO | PTE2_NM), "the clean page got RO so its first write is seen: {f:?}");
    r.check();
}

#[test]
fn a_run_never_written_promotes_to_a_read_only_section() {
    let mut r = rig(2048);
    let (_, pm) = r.mapped_run(VA, |_| read_access());
    assert_eq!(r.stat("vm.pmap.section.promotions"), 1);
    let (f, shift) = leaf(&r, pm, VA);
    assert_eq!(shift, 20);
    assert!(f.contains(PTE2_RO | PTE2_NM | PTE2_A));
    // A write is vm_fault's to handle (the mapping is read-only now).
    assert!(!r.fault(pm, VA + 4096, prot::WRITE));
    assert_eq!(hw_walk(&mut r, pm, VA, Access::Write), Err(WalkFault::Protection));
    r.check();
}

#[test]
fn unreferenced_entries_do_not_promote_and_never_referenced_sections_are_not_demoted() {
    let mut r = rig(2048);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // The first page mapped speculatively (no access flag), the rest by faults.
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm, VirtAddr(VA), VirtAddr(VA + 4096), &|_| Some(pages[0]), prot::RW);
    r.enter_all(pm, VA + 4096, &pages[1..], |_| rw_access());
    assert_eq!(r.stat("splab.pmap.section.p_failures.first"), 1);
    let mut r = rig(2048);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // A whole populated run mapped at once: a read-only section, A clear.
    let lookup = |v: VirtAddr| (v.0 >= VA && v.0 < VA + SECTION_SIZE).then(|| pages[((v.0 - VA) / 4096) as usize]);
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm, VirtAddr(VA), VirtAddr(VA + SECTION_SIZE), &lookup, prot::RW);
    assert_eq!(r.stat("vm.pmap.section.mappings"), 1);
    let (f, shift) = leaf(&r, pm, VA);
    assert_eq!(shift, 20);
    assert!(!f.contains(PTE2_A) && f.contains(PTE2_RO));
    // Destroyed rather than demoted (pmap_demote_pte1).
    r.protect(pm, VA, VA + 4096, prot::READ);
    assert_eq!((r.stat("vm.pmap.section.demotions"), r.stat("splab.pmap.section.demotion_aborts")), (0, 1));
    assert!(r.extract(pm, VA + 8192).is_none());
    assert_eq!(r.pmap.0.pv.live(), 0);
    r.check();
}

#[test]
fn demotion_reuses_the_kept_table_when_nothing_changed() {
    let mut r = rig(2048);
    let (pages, pm) = r.mapped_run(VA, |_| rw_access());
    let allocs = r.ev.pt_page_allocs;
    r.protect(pm, VA + 4096, VA + 3 * 4096, prot::READ);
    assert_eq!(r.stat("vm.pmap.section.demotions"), 1);
    assert_eq!(r.stat("splab.pmap.section.demotion_ptp_reused"), 1);
    assert_eq!(r.ev.pt_page_allocs, allocs, "no page-table page allocated");
    let ro = r.extract(pm, VA + 4096).unwrap();
    let rw = r.extract(pm, VA + 3 * 4096).unwrap();
    assert_eq!((ro.shift, ro.prot & prot::WRITE, rw.prot & prot::WRITE), (12, 0, prot::WRITE));
    assert!(r.phys.pages.get(pages[1]).has(pflags::DIRTY), "the modified state went to the page");
    assert_eq!(r.pmap.0.pv.live(), 256);
    r.check();
}

#[test]
fn demotion_refills_the_kept_table_after_the_section_changed() {
    let mut r = rig(2048);
    let pages = r.superpage_run();
    let pm = r.pinit();
    for (i, &m) in pages.iter().enumerate() {
        enter(&mut r, pm, VA + i as u64 * 4096, m, prot::ALL, rw_access()).unwrap();
    }
    // The whole section made read-only (pmap_protect_pte1), then a part
    // of it non-executable: the kept table is stale and is refilled.
    r.protect(pm, VA, VA + SECTION_SIZE, prot::READ | prot::EXEC);
    assert_eq!(leaf(&r, pm, VA).1, 20, "a whole section is changed in place");
    r.protect(pm, VA, VA + 4096, prot::READ);
    assert_eq!((r.stat("vm.pmap.section.demotions"), r.stat("splab.pmap.section.demotion_ptp_reused")), (1, 0));
    let (f, shift) = leaf(&r, pm, VA + 5 * 4096);
    assert_eq!(shift, 12);
    assert!(f.contains(PTE2_RO | PTE2_NM) && !f.contains(PTE2_NX), "{f:?}");
    assert!(leaf(&r, pm, VA).0.contains(PTE2_NX));
    r.check();
}

#[test]
fn direct_section_demotion_allocates_a_table_or_removes_the_section() {
    let mut r = rig(2048);
    let pages = r.superpage_run();
    let pm = r.pinit();
    let writable = EnterFlags { access: prot::RW, psind: Psind::new(1), ..Default::default() };
    enter(&mut r, pm, VA, pages[0], prot::RW, writable).unwrap();
    assert_eq!(r.stat("vm.pmap.section.mappings"), 1);
    assert!(r.pmap.0.pm(pm).pt2pg.is_empty(), "a direct section has no L2 table");
    // With memory: a PT2PG page is allocated and filled.
    let allocs = r.ev.pt_page_allocs;
    r.protect(pm, VA, VA + 4096, prot::READ);
    assert_eq!((r.stat("vm.pmap.section.demotions"), r.ev.pt_page_allocs), (1, allocs + 1));
    assert_eq!(r.extract(pm, VA + 4096).unwrap().shift, 12);
    r.check();

    // Without: the section is removed, to be refaulted.
    let mut r = rig(2048);
    let pages = r.superpage_run();
    let pm = r.pinit();
    enter(&mut r, pm, VA, pages[0], prot::RW, writable).unwrap();
    while r.phys.alloc_noobj().is_some() {}
    r.protect(pm, VA, VA + 4096, prot::READ);
    assert_eq!(r.stat("splab.pmap.section.demotion_aborts"), 1);
    assert!(r.extract(pm, VA + 8192).is_none());
    assert_eq!(r.pmap.0.pv.live(), 0);
    r.check();
}

#[test]
fn a_direct_section_demotes_into_the_page_its_neighbours_use() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // A 4 KB mapping in the next MB makes the 4 MB's PT2PG page.
    let other = r.phys.alloc_noobj().unwrap();
    enter(&mut r, pm, VA + SECTION_SIZE, other, prot::RW, rw_access()).unwrap();
    enter(&mut r, pm, VA, pages[0], prot::RW, EnterFlags { access: prot::RW, psind: Psind::new(1), ..Default::default() }).unwrap();
    let allocs = r.ev.pt_page_allocs;
    r.remove(pm, VA + 4096, VA + 2 * 4096);
    assert_eq!((r.stat("vm.pmap.section.demotions"), r.ev.pt_page_allocs), (1, allocs));
    assert_eq!(r.pmap.0.pm(pm).pt2pg.len(), 1);
    assert_eq!(r.pmap.0.pm(pm).pt2_count[l1_index(VA) as usize], 255);
    r.check();
}

#[test]
fn removing_a_whole_section_is_one_step_and_frees_every_table() {
    let mut r = rig(2048);
    let pages = r.superpage_run();
    let pm = r.pinit();
    let free0 = r.phys.buddy.free_count();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    let flushes = r.ev.invlpg;
    r.remove(pm, VA, VA + SECTION_SIZE);
    assert_eq!(r.stat("vm.pmap.section.demotions"), 0);
    assert_eq!(r.ev.invlpg, flushes + 1, "one TLB entry to flush");
    assert_eq!(r.pmap.0.pv.live(), 0);
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::DIRTY | pflags::REFERENCED)), "state handed to all 256 pages");
    assert_eq!(r.phys.buddy.free_count(), free0, "the kept L2 table's page is freed");
    assert!(r.pmap.0.pm(pm).pt2pg.is_empty());
    r.check();
}

#[test]
fn unmapping_part_of_a_section_demotes_it() {
    let mut r = rig(2048);
    let (_, pm) = r.mapped_run(VA, |_| rw_access());
    r.remove(pm, VA + 7 * 4096, VA + 9 * 4096);
    assert_eq!(r.stat("vm.pmap.section.demotions"), 1);
    assert!(r.extract(pm, VA + 8 * 4096).is_none());
    assert_eq!(r.extract(pm, VA + 9 * 4096).unwrap().shift, 12);
    assert_eq!(r.pmap.0.pv.live(), 254);
    r.check();
}

#[test]
fn sixteen_page_runs_promote_to_large_pages_and_then_to_a_section() {
    let mut r = rig_lp(2048);
    let (pages, pm) = r.mapped_first(VA, 16, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.largepage.promotions"), 1);
    let m = r.extract(pm, VA + 0x3_456).unwrap();
    assert_eq!((m.shift, m.pa.0), (16, pages[3].addr_4k().0 + 0x456));
    let t = hw_walk(&mut r, pm, VA + 0xf_ff8, Access::Write).unwrap();
    assert_eq!((t.shift, t.pa(VA + 0xf_ff8).0), (16, pages[15].addr_4k().0 + 0xff8));
    assert_eq!(r.pmap.0.pv.live(), 16, "large pages keep a PV entry per 4 KB page");
    r.check();
    // The rest of the MB: 15 more large pages, then the section.
    r.enter_all(pm, VA + 16 * 4096, &pages[16..], |_| rw_access());
    assert_eq!((r.stat("vm.pmap.largepage.promotions"), r.stat("vm.pmap.section.promotions")), (16, 1));
    assert_eq!(leaf(&r, pm, VA).1, 20);
    r.check();
    // Demoting the section brings the large pages back from the kept table.
    r.remove(pm, VA + 0x8_0000, VA + 0x8_1000);
    assert_eq!(r.stat("splab.pmap.section.demotion_ptp_reused"), 1);
    assert_eq!(leaf(&r, pm, VA).1, 16);
    // And removing one page of a large page demotes only that large page.
    assert_eq!(r.stat("vm.pmap.largepage.demotions"), 1);
    assert_eq!(leaf(&r, pm, VA + 0x8_1000).1, 12);
    assert!(r.extract(pm, VA + 0x8_0000).is_none());
    r.check();
}

#[test]
fn the_large_page_level_is_off_by_default_and_fails_like_sections() {
    let mut r = rig(2048);
    r.mapped_first(VA, 16, |_| rw_access());
    assert_eq!((r.stat("vm.pmap.lp_enabled"), r.stat("vm.pmap.largepage.promotions")), (0, 0));
    let mut r = rig_lp(2048);
    let mut pages = r.superpage_run();
    let pm = r.pinit();
    pages.swap(17, 18);
    r.enter_all(pm, VA, &pages[..32], |i| if i == 5 { read_access() } else { rw_access() });
    assert_eq!(r.stat("splab.pmap.largepage.p_failures.attributes"), 1);
    assert_eq!(r.stat("splab.pmap.largepage.p_failures.not_contiguous"), 1);
    assert_eq!(r.stat("vm.pmap.largepage.promotions"), 0);
    r.check();
}

#[test]
fn enter_object_maps_sections_and_large_pages_directly() {
    let mut r = rig_lp(4096);
    let pages = r.superpage_run();
    let pm = r.pinit();
    let lookup = |v: VirtAddr| (v.0 >= VA && v.0 < VA + SECTION_SIZE).then(|| pages[((v.0 - VA) / 4096) as usize]);
    // Half a MB: no section fits, so 64 KB pages, then 4 KB ones at the end.
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm, VirtAddr(VA), VirtAddr(VA + 0x8_8000), &lookup, prot::RW);
    assert_eq!((r.stat("vm.pmap.section.mappings"), r.stat("vm.pmap.largepage.mappings")), (0, 8));
    let (f, shift) = leaf(&r, pm, VA + 0x1_0000);
    assert_eq!(shift, 16);
    assert!(f.contains(PTE2_RO) && !f.contains(PTE2_A), "read-only and speculative");
    assert_eq!(leaf(&r, pm, VA + 0x8_4000).1, 12);
    // An access: an access flag fault that sets A on all 16 entries.
    assert_eq!(hw_walk(&mut r, pm, VA + 0x1_2000, Access::Read), Err(WalkFault::AccessedDirty));
    assert!(r.fault(pm, VA + 0x1_2000, prot::READ));
    assert!(hw_walk(&mut r, pm, VA + 0x1_f000, Access::Read).is_ok());
    r.check();
    // The whole run at a fresh address space: one section.
    let pm2 = r.pinit();
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm2, VirtAddr(VA), VirtAddr(VA + SECTION_SIZE), &lookup, prot::RW);
    assert_eq!(r.stat("vm.pmap.section.mappings"), 1);
    r.check();
}

#[test]
fn pmap_fault_emulates_the_referenced_and_modified_bits() {
    let mut r = rig(2048);
    let pages = r.superpage_run();
    let pm = r.pinit();
    // A writable page entered for a read: referenced, not modified.
    enter(&mut r, pm, VA, pages[0], prot::RW, read_access()).unwrap();
    // A read-only page entered speculatively: not referenced.
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm, VirtAddr(VA + 4096), VirtAddr(VA + 8192), &|_| Some(pages[1]), prot::RW);
    assert_eq!(hw_walk(&mut r, pm, VA, Access::Write), Err(WalkFault::Protection), "NM: read-only to the MMU");
    assert_eq!(hw_walk(&mut r, pm, VA + 4096, Access::Read), Err(WalkFault::AccessedDirty));
    assert!(r.fault(pm, VA, prot::WRITE), "the first write clears NM");
    assert!(r.fault(pm, VA + 4096, prot::READ), "an access flag fault sets A");
    assert!(hw_walk(&mut r, pm, VA, Access::Write).is_ok());
    assert!(hw_walk(&mut r, pm, VA + 4096, Access::Read).is_ok());
    assert!(r.extract(pm, VA).unwrap().dirty);
    assert!(!r.fault(pm, VA + 4096, prot::WRITE), "a store to a read-only page is vm_fault's");
    assert!(!r.fault(pm, VA + 8192, prot::READ), "so is an unmapped page");
    assert!(!r.fault(pm, VA, prot::EXEC), "and a fetch from a page with XN");
    assert_eq!((r.stat("splab.pmap.nm_faults"), r.stat("splab.pmap.af_faults")), (1, 1));
    r.check();
}

#[test]
fn a_clean_writable_section_is_marked_modified_by_one_fault() {
    // Large-page shared memory: unmanaged, mapped writable on a read.
    let mut r = rig(2048);
    let base = r.phys.buddy.alloc_contig(256, 256).unwrap();
    for i in 0..256 {
        r.phys.pages.get_mut(Pfn(base.0 + i)).flags = pflags::INUSE | pflags::UNMANAGED | pflags::LARGEPAGE;
    }
    let pm = r.pinit();
    enter(&mut r, pm, VA, base, prot::RW, EnterFlags { access: prot::READ, psind: Psind::new(1), ..Default::default() }).unwrap();
    assert_eq!(hw_walk(&mut r, pm, VA + 0x7_0000, Access::Write), Err(WalkFault::Protection));
    assert!(r.fault(pm, VA + 0x7_0000, prot::WRITE));
    assert!(hw_walk(&mut r, pm, VA + 0xf_f000, Access::Write).is_ok(), "the whole MB is writable now");
    r.check();
}

#[test]
fn the_vectors_page_and_kernel_addresses_are_never_promoted() {
    // Low vectors inside the run (the older arm pmap's ARM_VECTORS_LOW).
    let mut r = rig(2048);
    r.pmap.0.vectors = VA + 0x3_0000;
    let (_, pm) = r.mapped_run(VA, |_| rw_access());
    assert_eq!((r.stat("vm.pmap.section.promotions"), r.stat("vm.pmap.section.p_failures")), (0, 0));
    assert_eq!(leaf(&r, pm, VA).1, 12);
    r.check();
    // Kernel addresses: not user mappings, never promoted (FreeBSD's
    // failure(2)); the checker rejects them in a user address space.
    let mut r = rig(2048);
    let (_, pm) = r.mapped_run(0xc000_0000, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.section.promotions"), 0);
    assert!(!leaf(&r, pm, 0xc000_0000).0.contains(PTE2_U));
    // Nor pages without PV entries (unmanaged).
    let mut r = rig(2048);
    let pages = r.superpage_run();
    for &m in &pages {
        r.phys.pages.get_mut(m).flags |= pflags::UNMANAGED;
    }
    let pm = r.pinit();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    assert_eq!((r.stat("vm.pmap.section.promotions"), r.pmap.0.pv.live()), (0, 0));
    r.check();
}

#[test]
fn promotion_flushes_every_cpu_by_broadcast_and_a_switch_flushes_the_rest() {
    let mut r = rig(2048);
    let (pages, pm) = r.mapped_on_both_cpus(VA, 255);
    // Both CPUs have used 4 KB translations of the MB.
    let t = user_read_4k(pages[7]);
    r.fill_tlbs(VA + 7 * 4096, ASID, t);
    r.enter_all(pm, VA + 255 * 4096, &pages[255..], |_| rw_access());
    assert_eq!(r.stat("vm.pmap.section.promotions"), 1);
    assert!(!r.tlb_holds(VA + 7 * 4096, ASID), "break-before-make left a 4 KB entry");
    assert_eq!(r.ev.shootdown_ipis, 0, "TLB maintenance is broadcast in hardware");
    // No ASIDs: switching address spaces flushes the non-global entries.
    r.assert_switch_flushes(pm, VA, ASID, t);
}

#[test]
fn remove_write_and_remove_all_demote_what_holds_the_page() {
    let mut r = rig_lp(2048);
    let (pages, pm) = r.mapped_first(VA, 32, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.largepage.promotions"), 2);
    r.remove_write(pages[3]);
    assert_eq!(r.stat("vm.pmap.largepage.demotions"), 1);
    assert_eq!(r.extract(pm, VA + 3 * 4096).unwrap().prot & prot::WRITE, 0);
    assert_ne!(r.extract(pm, VA + 4 * 4096).unwrap().prot & prot::WRITE, 0);
    r.remove_all(pages[20]);
    assert_eq!(r.stat("vm.pmap.largepage.demotions"), 2);
    assert!(r.extract(pm, VA + 20 * 4096).is_none());
    assert_eq!(r.pmap.0.pv.live(), 31);
    r.check();
}

#[test]
fn advise_demotes_leaves_a_hole_and_clears_the_referenced_bits() {
    let mut r = rig(2048);
    let (pages, pm) = r.mapped_run(VA, |_| rw_access());
    r.advise(pm, VA + 4 * 4096, VA + 16 * 4096, Advice::DontNeed);
    assert_eq!(r.stat("vm.pmap.section.demotions"), 1);
    assert!(r.extract(pm, VA + 4 * 4096).is_none(), "the first page of the range was removed");
    let (f, _) = leaf(&r, pm, VA + 5 * 4096);
    assert!(!f.contains(PTE2_A) && f.contains(PTE2_NM) && !f.contains(PTE2_RO), "{f:?}");
    assert!(r.phys.pages.get(pages[5]).has(pflags::DIRTY));
    assert!(leaf(&r, pm, VA + 20 * 4096).0.contains(PTE2_A), "outside the range: untouched");
    assert_eq!(hw_walk(&mut r, pm, VA + 5 * 4096, Access::Read), Err(WalkFault::AccessedDirty));
    r.check();
}

#[test]
fn check_finds_a_large_page_with_unequal_entries() {
    let mut r = rig_lp(2048);
    let (_, pm) = r.mapped_first(VA, 16, |_| rw_access());
    let Some(Leaf::Pte2(p2, e)) = r.pmap.0.find(&r.mem, pm, VA + 5 * 4096) else { panic!("mapped") };
    assert!(e.is_large(), "{e:?}");
    r.assert_check_finds("16 identical", |_, env| Armv7::wr2(env.mem, p2, e.without(PTE2_NX)));
}

#[test]
fn tables_are_where_the_hardware_expects_them() {
    let mut r = rig(2048);
    let pm = r.pinit();
    let l1 = r.pmap.root(pm);
    assert_eq!(l1.0 % (16 << 10), 0, "TTBR0 needs a 16 KB-aligned L1 table");
    let m = r.phys.alloc_noobj().unwrap();
    // Four MBs share one PT2PG page, each with its own 1 KB table.
    for k in 0..4 {
        enter(&mut r, pm, VA + k * SECTION_SIZE, m, prot::READ, read_access()).unwrap();
    }
    assert_eq!(r.pmap.0.pm(pm).pt2pg.len(), 1);
    let tables: Vec<u64> = (0..4).map(|k| Armv7::rd1(&r.mem, r.pmap.0.pte1_pa(pm, VA + k * SECTION_SIZE))).map(|e| {
        assert_eq!((e.kind(), e.domain()), (L1Kind::Table, 0));
        e.table_base()
    }).collect();
    assert_eq!(tables.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(), vec![1024; 3]);
    assert!(PmapArmv7::new(2 << 20, true).is_err(), "8 GiB is beyond 32-bit physical addresses");
    assert_eq!(SectionFlags::AP0.bits(), 1 << 10);
    r.check();
}

/// pmap_clear_modify on one page of a modified section demotes it and
/// gives that page NM back; the others stay modified.
#[test]
fn clear_modify_demotes_a_modified_section_and_marks_the_page_unmodified() {
    let mut r = rig(2048);
    let (pages, pm) = r.mapped_run(VA, |_| rw_access());
    r.clear_modify(pages[5]);
    assert_eq!(r.stat("vm.pmap.section.demotions"), 1);
    let (f5, size5) = leaf(&r, pm, VA + 5 * 4096);
    assert!(f5.contains(PTE2_NM) && size5 == 12, "{f5:?} {size5}");
    assert!(!leaf(&r, pm, VA + 6 * 4096).0.contains(PTE2_NM));
    assert!(!r.is_modified(pages[5]) && r.is_modified(pages[6]));
    assert!(r.phys.pages.get(pages[5]).has(pflags::DIRTY), "the caller cleans it");
    // The next store takes a permission fault that pmap_fault resolves.
    assert!(hw_walk(&mut r, pm, VA + 5 * 4096, Access::Write).is_err());
    r.check();
}

/// A modified 64 KB large page: clearing one page demotes it.
#[test]
fn clear_modify_demotes_a_modified_large_page() {
    let (mut r, pages, _) = large_page_mapped();
    assert_eq!(r.stat("vm.pmap.largepage.promotions"), 1);
    r.clear_modify(pages[3]);
    assert_eq!(r.stat("vm.pmap.largepage.demotions"), 1);
    assert!(!r.is_modified(pages[3]) && r.is_modified(pages[4]));
    r.check();
}

/// pmap_ts_referenced: a section's A and a large page's A are cleared by
/// the hashed page only (one in 256, one in 16), counted for every page.
#[test]
fn ts_referenced_clears_shared_bits_once() {
    let mut r = rig(2048);
    let (pages, pm) = r.mapped_run(VA, |_| rw_access());
    let k = (0..256).find(|&i| crate::refbits::selected_for_clearing(pages[i], pm, VA, 20, 256)).unwrap();
    let other = (k + 1) % 256;
    assert_eq!(r.ts_referenced(pages[other]), 1);
    assert_eq!(r.ts_referenced(pages[k]), 1);
    assert!(!r.is_referenced(pages[other]));
    assert_eq!(r.ts_referenced(pages[other]), 0);
    assert!(hw_walk(&mut r, pm, VA, Access::Read).is_err(), "an access flag fault follows");

    let (mut r, pages, pm) = large_page_mapped();
    let k = (0..16).find(|&i| crate::refbits::selected_for_clearing(pages[i], pm, VA, 16, 16)).unwrap();
    let other = (k + 1) % 16;
    assert_eq!(r.ts_referenced(pages[other]), 1);
    assert!(r.is_referenced(pages[k]));
    assert_eq!(r.ts_referenced(pages[k]), 1);
    assert!(!r.is_referenced(pages[other]));
    assert_eq!(r.stat("vm.pmap.largepage.demotions"), 0);
    r.check();
}

/// Dropping a 1 MB run whole removes its section without demotion.
#[test]
fn remove_all_superpage_drops_every_mapping_without_demoting() {
    let mut r = rig(2048);
    let (pages, pm) = r.mapped_run(VA, |_| rw_access());
    r.remove_all_superpage(pages[100]);
    assert_eq!(r.stat("vm.pmap.section.demotions"), 0);
    assert_eq!(r.pmap.0.pv.live(), 0);
    assert!(r.extract(pm, VA).is_none());
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::DIRTY | pflags::REFERENCED)));
    r.check();
}
