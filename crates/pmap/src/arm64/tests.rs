//! Direct tests of the arm64 pmap: L3C and L2 promotion and their failure
//! reasons, demotion reusing the stashed table, direct 64 KB and 2 MB
//! mappings, whole-superpage removal, 1 GB blocks, break-before-make and
//! broadcast TLB maintenance, and the invariant checker.

use crate::radix::{self, Format};
use super::*;
use splab_hw::VirtAddr;
use splab_vm::pmap::{Advice, Pmap};
use crate::testrig::{rw_access, Rig};
use splab_hw::arm64::Arm64Walker;
use splab_hw::mmu::{Access, WalkRefs, WalkReq, Walker};
use splab_hw::tlb::TlbArrayConfig;
use splab_vm::page::pflags;

const VA: u64 = 0x40_0000_0000;

fn rig(npages: u64) -> Rig<PmapArm64> {
    let tlb = vec![
        TlbArrayConfig { sizes: vec!["4K".into(), "64K".into(), "2M".into()], entries: 48, ways: 48, level: 1, index: Default::default(), side: None },
        TlbArrayConfig { sizes: vec!["4K".into(), "64K".into(), "2M".into(), "1G".into()], entries: 1280, ways: 5, level: 2, index: Default::default(), side: None },
    ];
    Rig::with_tlb(PmapArm64::new(npages, true), npages, &tlb, &[12, 16, 21, 30])
}

fn new_space(r: &mut Rig<PmapArm64>) -> PmapId {
    r.pinit()
}

/// A rig of `npages` pages, a new address space and the first `n` pages
/// of the rig's object, allocated but not mapped.
fn allocated(npages: u64, n: u32) -> (Rig<PmapArm64>, PmapId, Vec<Pfn>) {
    let mut r = rig(npages);
    let pm = new_space(&mut r);
    let pages: Vec<Pfn> = (0..n).map(|i| r.page(i)).collect();
    (r, pm, pages)
}

/// A rig of 4096 pages and a new address space with pages `range` of the
/// rig's object faulted in read/write, as `fault_in` does.
fn faulted(range: std::ops::Range<u32>) -> (Rig<PmapArm64>, PmapId, Vec<Pfn>) {
    let mut r = rig(4096);
    let pm = new_space(&mut r);
    let pages = fault_in(&mut r, pm, range, |_| rw_access());
    (r, pm, pages)
}

/// Faults in pages `range` of the rig's object at VA + 4 KB per page, each
/// allocated just before it is mapped, as page faults do.
fn fault_in(r: &mut Rig<PmapArm64>, pm: PmapId, range: std::ops::Range<u32>, flags: impl Fn(u32) -> EnterFlags) -> Vec<Pfn> {
    range
        .map(|i| {
            let m = r.page(i);
            r.enter(pm, VA + i as u64 * 4096, m, prot::RW, flags(i)).unwrap();
            m
        })
        .collect()
}

/// What the hardware walk of `va` gives (page size, physical address).
fn walk(r: &mut Rig<PmapArm64>, pm: PmapId, va: u64, a: Access) -> (u8, u64) {
    let (root, asid) = (r.pmap.root(pm), r.pmap.asid(pm));
    let mut refs = WalkRefs::default();
    let t = Arm64Walker.walk(&mut r.mem, &mut r.mmu[0].pwc, WalkReq::new(root, asid, VirtAddr(va), a), &mut refs).unwrap();
    (t.shift, t.pa(va).0)
}

#[test]
fn full_dirty_run_promotes_every_64k_run_then_the_2m_block() {
    let (mut r, pm, pages) = faulted(0..512);
    assert_eq!(r.stat("vm.pmap.l3c.promotions"), 32);
    assert_eq!(r.stat("vm.pmap.l3c.p_failures"), 0, "each run is tried once, when it is complete");
    assert_eq!(r.stat("vm.pmap.l2.promotions"), 1);
    let m = r.extract(pm, VA + 5 * 4096 + 8).unwrap();
    assert_eq!((m.shift, m.pa.0, m.dirty), (21, pages[5].addr_4k().0 + 8, true));
    assert_eq!(walk(&mut r, pm, VA + 0x12_3456, Access::Write), (21, pages[0].addr_4k().0 + 0x12_3456));
    assert_eq!(r.pmap.0.pv.live(), 1, "512 PV entries became one");
    r.check();
}

/// A 64 KB run promotes as soon as its 16 pages are populated, long
/// before the reservation is full, and the walk gives one 64 KB page.
#[test]
fn a_populated_64k_run_promotes_inside_a_partial_reservation() {
    let (mut r, pm, pages) = faulted(16..40);
    assert_eq!((r.stat("vm.pmap.l3c.promotions"), r.stat("vm.pmap.l2.promotions")), (1, 0));
    assert_eq!(r.extract(pm, VA + 20 * 4096).unwrap().shift, 16);
    assert_eq!(r.extract(pm, VA + 33 * 4096).unwrap().shift, 12);
    assert_eq!(walk(&mut r, pm, VA + 0x1_5678, Access::Read), (16, pages[5].addr_4k().0 + 0x678));
    assert_eq!(walk(&mut r, pm, VA + 33 * 4096, Access::Read).0, 12);
    assert_eq!(r.pmap.0.pv.live(), 24, "64 KB runs keep their 4 KB PV entries");
    r.check();
}

#[test]
fn a_clean_page_is_write_protected_and_blocks_promotion() {
    let mut r = rig(4096);
    let pm = new_space(&mut r);
    // Page 5 is only read: writable (DBM) but clean.
    fault_in(&mut r, pm, 0..16, |i| if i == 5 { EnterFlags { access: prot::READ, ..Default::default() } } else { rw_access() });
    assert_eq!(r.stat("vm.pmap.l3c.promotions"), 0);
    assert_eq!(r.stat("splab.pmap.l3c.p_failures.attributes"), 1);
    let m = r.extract(pm, VA + 5 * 4096).unwrap();
    assert_eq!(m.prot & prot::WRITE, 0, "the clean page lost write access so its first write is seen");
    // The write faults, pmap_enter makes it dirty, and the run promotes.
    let m5 = Pfn(r.extract(pm, VA).unwrap().pa.pfn_4k().0 + 5);
    r.enter(pm, VA + 5 * 4096, m5, prot::RW, rw_access()).unwrap();
    assert_eq!(r.stat("vm.pmap.l3c.promotions"), 1);
    r.check();
}

#[test]
fn a_misaligned_first_page_fails_l3c_promotion() {
    let mut r = rig(4096);
    let pm = new_space(&mut r);
    // Object page i at VA + 4 KB * (i + 1): virtual and physical runs are
    // out of step, so the 64 KB run never lines up.
    for i in 0..32u32 {
        let m = r.page(i);
        r.enter(pm, VA + (i as u64 + 1) * 4096, m, prot::RW, rw_access()).unwrap();
    }
    assert_eq!(r.stat("vm.pmap.l3c.promotions"), 0);
    assert_eq!(r.stat("vm.pmap.l3c.p_failures"), 0, "pmap_enter does not even try: va and pa differ modulo 64 KB");
    // A hand-made run whose first page is misaligned is refused.
    let l3 = r.pmap.0.entry(&r.mem, pm, VA + 4096, L3_SHIFT).unwrap();
    let (p, mut env) = r.env();
    assert!(!p.0.promote_l3c(&mut env, pm, l3, VA + 4096));
    assert_eq!(r.stat("splab.pmap.l3c.p_failures.first_misaligned"), 1);
}

#[test]
fn demotion_reuses_the_stashed_l3_table_and_splits_one_64k_run() {
    let (mut r, pm, _) = faulted(0..512);
    let allocs = r.ev.pt_page_allocs;
    r.protect(pm, VA + 4096, VA + 3 * 4096, prot::READ);
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 1);
    assert_eq!(r.stat("splab.pmap.l2.demotion_ptp_reused"), 1);
    assert_eq!(r.stat("vm.pmap.l3c.demotions"), 1, "only the run holding the change");
    assert_eq!(r.ev.pt_page_allocs, allocs, "no page-table page allocated");
    let ro = r.extract(pm, VA + 4096).unwrap();
    let rw = r.extract(pm, VA + 3 * 4096).unwrap();
    assert_eq!((ro.shift, ro.prot & prot::WRITE, rw.shift, rw.prot & prot::WRITE), (12, 0, 12, prot::WRITE));
    assert_eq!(r.extract(pm, VA + 0x1_0000).unwrap().shift, 16, "the other runs stay 64 KB");
    assert_eq!(r.pmap.0.pv.live(), 512);
    r.check();
}

#[test]
fn a_direct_2m_mapping_without_memory_to_demote_is_removed() {
    let (mut r, pm, pages) = allocated(2048, 512);
    r.enter(pm, VA, pages[0], prot::RW, EnterFlags { access: prot::RW, psind: Psind::new(2), ..Default::default() }).unwrap();
    assert_eq!(r.stat("vm.pmap.l2.mappings"), 1);
    while r.phys.alloc_noobj().is_some() {}
    r.protect(pm, VA, VA + 4096, prot::READ);
    assert_eq!(r.stat("splab.pmap.l2.demotion_aborts"), 1);
    assert!(r.extract(pm, VA + 8192).is_none(), "the 2MB mapping is gone, to be refaulted");
    assert_eq!(r.pmap.0.pv.live(), 0);
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::DIRTY)), "its dirty state went to the pages");
    r.check();
}

#[test]
fn a_direct_64k_mapping_is_removed_whole_and_frees_its_table() {
    let (mut r, pm, pages) = allocated(4096, 32);
    let free0 = r.phys.buddy.free_count();
    let fl = EnterFlags { access: prot::READ, psind: Psind::new(1), ..Default::default() };
    r.enter(pm, VA + 0x1_0000, pages[16], prot::READ, fl).unwrap();
    assert_eq!(r.stat("vm.pmap.l3c.mappings"), 1);
    assert_eq!(r.extract(pm, VA + 0x1_f000).unwrap().pa, pages[31].addr_4k());
    assert_eq!(r.pmap.0.pv.live(), 16);
    r.check();
    r.remove(pm, VA + 0x1_0000, VA + 0x2_0000);
    assert_eq!((r.stat("vm.pmap.l3c.demotions"), r.pmap.0.pv.live()), (0, 0));
    assert_eq!(r.phys.buddy.free_count(), free0, "the L1, L2 and L3 tables are freed");
    r.check();
}

#[test]
fn removing_a_whole_block_frees_its_stash_and_dirties_every_page() {
    let (mut r, pm, pages) = faulted(0..512);
    r.remove(pm, VA, VA + L2_SIZE);
    assert_eq!((r.stat("vm.pmap.l2.demotions"), r.pmap.0.pv.live()), (0, 0));
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::DIRTY | pflags::REFERENCED)));
    // Only the reservation's pages and the L0 table remain allocated.
    assert_eq!(r.phys.buddy.free_count(), 4096 - 512 - 1);
    r.check();
}

#[test]
fn a_1g_block_demotes_in_two_steps() {
    let mut r = rig(1 << 19); // 2 GiB
    let base = r.large_page_memory();
    let pm = new_space(&mut r);
    r.enter(pm, 1 << 30, base, prot::RW, EnterFlags { access: prot::READ, psind: Psind::new(3), ..Default::default() }).unwrap();
    assert_eq!(walk(&mut r, pm, (1 << 30) + 12345, Access::Write), (30, base.addr_4k().0 + 12345));
    r.remove(pm, (1 << 30) + (5 << 21) + 4096, (1 << 30) + (5 << 21) + 8192);
    assert_eq!((r.stat("vm.pmap.l1.demotions"), r.stat("vm.pmap.l2.demotions")), (1, 1));
    assert!(r.extract(pm, (1 << 30) + (5 << 21) + 4096).is_none());
    assert_eq!(r.extract(pm, (1 << 30) + (6 << 21)).unwrap().shift, 21);
    assert_eq!(r.extract(pm, (1 << 30) + (5 << 21)).unwrap().shift, 12, "the run holding the hole");
    assert_eq!(r.extract(pm, (1 << 30) + (5 << 21) + 0x1_0000).unwrap().shift, 16);
    r.check();
}

/// Promotion replaces entries break-before-make, and every TLB
/// invalidation is a broadcast: it reaches a CPU that is not running the
/// address space, and needs no interrupt.
#[test]
fn tlb_maintenance_is_broadcast_and_promotion_is_break_before_make() {
    let mut r = rig(4096);
    let pm = new_space(&mut r);
    r.activate(pm, 0);
    let pages = fault_in(&mut r, pm, 0..511, |_| rw_access());
    let asid = r.pmap.asid(pm);
    // Both CPUs cache the 4 KB translation of the last page entered.
    let t = splab_hw::mmu::Translation { pa_base: pages[500].addr_4k().0, shift: 12, perm: splab_hw::mmu::perm::READ };
    r.fill_tlbs(VA + 500 * 4096, asid, t);
    fault_in(&mut r, pm, 511..512, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.l2.promotions"), 1);
    assert!(!r.tlb_holds(VA + 500 * 4096, asid), "a 4 KB entry survived the promotion");
    let t = splab_hw::mmu::Translation { pa_base: pages[0].addr_4k().0, shift: 21, perm: splab_hw::mmu::perm::READ };
    r.mmu[1].tlb.fill(VA, asid, t);
    r.remove(pm, VA, VA + L2_SIZE);
    assert!(r.mmu[1].tlb.lookup(VA + 4096, asid).is_none(), "the CPU not running the space was reached");
    assert_eq!(r.ev.shootdown_ipis, 0, "TLBI broadcasts need no IPIs");
}

#[test]
fn enter_object_maps_blocks_and_runs_read_only_and_unaccessed() {
    // A full reservation at object pages 0..512 and 40 pages of the next.
    let (mut r, pm, pages) = allocated(8192, 552);
    let lookup = |va: VirtAddr| pages.get(((va.0 - VA) / 4096) as usize).copied();
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm, VirtAddr(VA), VirtAddr(VA + 552 * 4096), &lookup, prot::RW);
    assert_eq!((r.stat("vm.pmap.l2.mappings"), r.stat("vm.pmap.l3c.mappings")), (1, 2));
    let m = r.extract(pm, VA + 513 * 4096).unwrap();
    assert_eq!((m.shift, m.prot & prot::WRITE), (16, 0));
    assert_eq!(r.extract(pm, VA + 550 * 4096).unwrap().shift, 12);
    let (e, _, _) = r.pmap.0.find_leaf(&r.mem, pm, VA).unwrap();
    assert!(!e.has(DescFlags::AF), "speculative mappings leave AF clear");
    r.check();
}

#[test]
fn madvise_dontneed_keeps_every_run_dirty_or_read_only() {
    let (mut r, pm, pages) = faulted(0..512);
    r.advise(pm, VA, VA + 0x1_0000, Advice::DontNeed);
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 1);
    assert!(r.extract(pm, VA + 0xf000).is_none(), "the range's last page is unmapped to allow repromotion");
    let m = r.extract(pm, VA).unwrap();
    assert_eq!((m.shift, m.dirty, m.prot & prot::WRITE), (12, false, prot::WRITE), "clean but still writable");
    assert!(r.phys.pages.get(pages[0]).has(pflags::DIRTY));
    r.check();
}

/// pmap_remove_write and pmap_is_modified: a writable block and the
/// writable run holding the page are demoted, only that page loses write
/// access, and its modified state moves to the page.
#[test]
fn remove_write_demotes_what_maps_the_page_writable() {
    let (mut r, pm, pages) = faulted(0..512);
    assert!(r.is_modified(pages[3]));
    r.remove_write(pages[3]);
    assert_eq!((r.stat("vm.pmap.l2.demotions"), r.stat("vm.pmap.l3c.demotions")), (1, 1));
    let m3 = r.extract(pm, VA + 3 * 4096).unwrap();
    assert_eq!((m3.shift, m3.prot & prot::WRITE, m3.dirty), (12, 0, false));
    assert!(r.phys.pages.get(pages[3]).has(pflags::DIRTY));
    let m20 = r.extract(pm, VA + 20 * 4096).unwrap();
    assert_eq!((m20.shift, m20.prot & prot::WRITE, m20.dirty), (16, prot::WRITE, true));
    assert!(!r.is_modified(pages[3]) && r.is_modified(pages[20]));
    r.check();
}

#[test]
fn check_finds_a_missing_pv_entry_and_a_broken_run() {
    let (mut r, pm, pages) = faulted(0..16);
    let l3 = r.pmap.0.entry(&r.mem, pm, VA + 3 * 4096, L3_SHIFT).unwrap();
    let e = Desc::read(&r.mem, l3);
    r.assert_check_finds("L3C run", |_, env| radix::wr(env.mem, l3, e.without(DescFlags::CONTIGUOUS)));
    radix::wr(&mut r.mem, l3, e);
    r.check();
    r.assert_check_finds("no PV entry", |p, env| assert!(p.0.pv.remove(env, pages[1], pm, VA + 4096)));
}

/// pmap_clear_modify on one page of a dirty 2 MB block demotes it, and
/// the page's 64 KB run too; that page becomes read-only and clean with
/// DBM kept (its next write is seen), the others stay dirty.
#[test]
fn clear_modify_demotes_a_dirty_block_and_the_run_and_write_protects_the_page() {
    let (mut r, pm, pages) = faulted(0..512);
    r.clear_modify(pages[5]);
    assert_eq!((r.stat("vm.pmap.l2.demotions"), r.stat("vm.pmap.l3c.demotions")), (1, 1));
    let e5 = Desc::read(&r.mem, r.pmap.0.entry(&r.mem, pm, VA + 5 * 4096, L3_SHIFT).unwrap());
    assert!(e5.writable_clean() && !e5.has(DescFlags::CONTIGUOUS), "{e5:?}");
    let m40 = r.extract(pm, VA + 40 * 4096).unwrap();
    assert!(m40.dirty);
    assert!(!r.is_modified(pages[5]) && r.is_modified(pages[6]) && r.is_modified(pages[40]));
    // A page in a dirty 64 KB run: the run is demoted, the page cleaned.
    r.clear_modify(pages[40]);
    assert_eq!(r.stat("vm.pmap.l3c.demotions"), 2);
    assert!(!r.is_modified(pages[40]) && r.is_modified(pages[41]));
    r.check();
}

/// pmap_ts_referenced: a block's AF is cleared by the hashed page only;
/// in a 64 KB run only the tested entry's AF goes, and the run counts as
/// referenced until all 16 are clear.
#[test]
fn ts_referenced_on_blocks_and_64k_runs() {
    let (mut r, pm, pages) = faulted(0..512);
    let k = (0..512).find(|&i| crate::refbits::selected_for_clearing(pages[i], pm, VA, L2_SHIFT, 512)).unwrap();
    let other = (k + 1) % 512;
    assert_eq!(r.ts_referenced(pages[other]), 1);
    assert!(r.is_referenced(pages[k]));
    assert_eq!(r.ts_referenced(pages[k]), 1);
    assert!(!r.is_referenced(pages[other]));
    assert!(r.phys.pages.get(pages[other]).has(pflags::DIRTY));
    // The walker sets AF again on the next access.
    walk(&mut r, pm, VA, Access::Read);
    assert!(r.is_referenced(pages[other]));

    let (mut r, _, pages) = faulted(16..40);
    assert_eq!(r.stat("vm.pmap.l3c.promotions"), 1);
    for (i, &m) in pages[..15].iter().enumerate() {
        assert_eq!(r.ts_referenced(m), 1, "page {i}");
    }
    assert_eq!(r.ts_referenced(pages[0]), 1, "page 15 still has AF: the run is referenced");
    assert_eq!(r.ts_referenced(pages[15]), 1);
    assert_eq!(r.ts_referenced(pages[0]), 0);
    assert!(!r.is_referenced(pages[3]));
    assert_eq!(r.stat("vm.pmap.l3c.demotions"), 0);
    r.check();
}

/// Dropping a 2 MB run whole removes its block without demotion.
#[test]
fn remove_all_superpage_drops_every_mapping_without_demoting() {
    let (mut r, pm, pages) = faulted(0..512);
    r.remove_all_superpage(pages[77]);
    assert_eq!(r.stat("vm.pmap.l2.demotions"), 0);
    assert_eq!(r.pmap.0.pv.live(), 0);
    assert!(r.extract(pm, VA).is_none());
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::DIRTY | pflags::REFERENCED)));
    r.check();
}
