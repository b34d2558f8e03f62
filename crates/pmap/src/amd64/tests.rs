//! Direct tests of the amd64 pmap: promotion and its failure reasons,
//! demotion with and without a stashed page-table page, whole-superpage
//! removal, 1 GB mappings, and TLB shootdown to every CPU running the
//! address space.

use super::*;
use splab_hw::VirtAddr;
use splab_vm::pmap::Pmap;
use crate::testrig::{rw_access, Rig};
use splab_hw::mmu::{perm, Translation};
use splab_vm::page::pflags;

const VA: u64 = 0x40_0000_0000;

fn rig(npages: u64) -> Rig<PmapAmd64> {
    Rig::new(PmapAmd64::new(npages, true), npages)
}

fn enter_all(r: &mut Rig<PmapAmd64>, pm: PmapId, pages: &[Pfn], flags: impl Fn(usize) -> EnterFlags) {
    r.enter_all(pm, VA, pages, flags)
}

/// A 2 MB run mapped at VA in a new address space and promoted, every page
/// entered with the given access.
fn promoted(r: &mut Rig<PmapAmd64>, access: Prot) -> (Vec<Pfn>, PmapId) {
    let pages = r.superpage_run();
    let (p, mut env) = r.env();
    let pm = p.pinit(&mut env).unwrap();
    enter_all(r, pm, &pages, |_| EnterFlags { access, ..Default::default() });
    assert_eq!(r.stat("vm.pmap.pde.promotions"), 1);
    (pages, pm)
}

#[test]
fn full_dirty_run_promotes_with_one_pv_entry() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let (p, mut env) = r.env();
    let pm = p.pinit(&mut env).unwrap();
    enter_all(&mut r, pm, &pages, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.pde.promotions"), 1);
    let m = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 5 * 4096 + 8)).unwrap();
    assert_eq!((m.shift, m.pa.0), (21, pages[5].addr().0 + 8));
    assert_eq!(r.pmap.0.pv.live(), 1, "512 PV entries became one");
    r.check();
}

#[test]
fn promotion_fails_on_mixed_dirty_state_and_write_protects_clean_pages() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let (p, mut env) = r.env();
    let pm = p.pinit(&mut env).unwrap();
    // Page 100 is only read: accessed but clean.
    enter_all(&mut r, pm, &pages, |i| if i == 100 { EnterFlags { access: prot::READ, ..Default::default() } } else { rw_access() });
    assert_eq!(r.stat("vm.pmap.pde.promotions"), 0);
    assert_eq!(r.stat("splab.pmap.pde.p_failures.attributes"), 1);
    let m = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 100 * 4096)).unwrap();
    assert_eq!(m.prot & prot::WRITE, 0, "the clean page lost write access so its first write is seen");
    r.check();
}

#[test]
fn promotion_needs_every_page_accessed() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let (p, mut env) = r.env();
    let pm = p.pinit(&mut env).unwrap();
    // The first page is entered without an access (a prefault): A clear.
    enter_all(&mut r, pm, &pages, |i| if i == 0 { EnterFlags::default() } else { rw_access() });
    assert_eq!(r.stat("vm.pmap.pde.promotions"), 0);
    assert_eq!(r.stat("splab.pmap.pde.p_failures.not_accessed"), 1);
}

#[test]
fn demotion_reuses_the_stashed_page_table_page() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let (p, mut env) = r.env();
    let pm = p.pinit(&mut env).unwrap();
    enter_all(&mut r, pm, &pages, |_| rw_access());
    let allocs = r.ev.pt_page_allocs;
    let (p, mut env) = r.env();
    p.protect(&mut env, pm, VirtAddr(VA + 4096), VirtAddr(VA + 3 * 4096), prot::READ);
    assert_eq!(r.stat("vm.pmap.pde.demotions"), 1);
    assert_eq!(r.stat("splab.pmap.pde.demotion_ptp_reused"), 1);
    assert_eq!(r.ev.pt_page_allocs, allocs, "no page-table page allocated");
    let ro = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 4096)).unwrap();
    let rw = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 3 * 4096)).unwrap();
    assert_eq!((ro.shift, ro.prot & prot::WRITE, rw.prot & prot::WRITE), (12, 0, prot::WRITE));
    assert_eq!(r.pmap.0.pv.live(), 512);
    r.check();
}

#[test]
fn direct_mapping_demotion_without_memory_removes_the_mapping() {
    let mut r = rig(2048);
    let pages = r.superpage_run();
    let (p, mut env) = r.env();
    let pm = p.pinit(&mut env).unwrap();
    let (p, mut env) = r.env();
    p.enter(&mut env, pm, VirtAddr(VA), pages[0], prot::RW, EnterFlags { access: prot::READ, psind: Psind::new(1), ..Default::default() }).unwrap();
    assert_eq!(r.stat("vm.pmap.pde.mappings"), 1);
    // Use up every free page, so demotion cannot get a page-table page.
    while r.phys.alloc_noobj().is_some() {}
    let (p, mut env) = r.env();
    p.protect(&mut env, pm, VirtAddr(VA), VirtAddr(VA + 4096), prot::READ);
    assert_eq!(r.stat("splab.pmap.pde.demotion_aborts"), 1);
    assert!(r.pmap.extract(&r.mem, pm, VirtAddr(VA + 8192)).is_none(), "the 2MB mapping is gone, to be refaulted");
    assert_eq!(r.pmap.0.pv.live(), 0);
    r.check();
}

#[test]
fn removing_a_whole_superpage_does_not_demote_and_frees_the_stash() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let free0 = r.phys.buddy.free_count();
    let (p, mut env) = r.env();
    let pm = p.pinit(&mut env).unwrap();
    enter_all(&mut r, pm, &pages, |_| rw_access());
    let (p, mut env) = r.env();
    p.remove(&mut env, pm, VirtAddr(VA), VirtAddr(VA + PAGE_2M));
    assert_eq!(r.stat("vm.pmap.pde.demotions"), 0);
    assert_eq!(r.pmap.0.pv.live(), 0);
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::DIRTY)), "dirty state moved to all 512 pages");
    // Only the PML4 page remains allocated by the pmap.
    assert_eq!(r.phys.buddy.free_count(), free0 - 1);
    r.check();
}

#[test]
fn one_gigabyte_mapping_demotes_in_two_steps() {
    let mut r = rig(1 << 19); // 2 GiB
    let base = r.phys.buddy.alloc_contig(1 << 18, 1 << 18).unwrap();
    for i in 0..1u32 << 18 {
        r.phys.pages.get_mut(Pfn(base.0 + i)).flags = pflags::INUSE | pflags::UNMANAGED | pflags::LARGEPAGE;
    }
    let (p, mut env) = r.env();
    let pm = p.pinit(&mut env).unwrap();
    let (p, mut env) = r.env();
    p.enter(&mut env, pm, VirtAddr(1 << 30), base, prot::RW, EnterFlags { access: prot::READ, psind: Psind::new(2), ..Default::default() }).unwrap();
    assert_eq!(r.pmap.extract(&r.mem, pm, VirtAddr((1 << 30) + 12345)).unwrap().shift, 30);
    let (p, mut env) = r.env();
    p.remove(&mut env, pm, VirtAddr((1 << 30) + (5 << 21) + 4096), VirtAddr((1 << 30) + (5 << 21) + 8192));
    assert_eq!(r.stat("vm.pmap.pdpe.demotions"), 1);
    assert_eq!(r.stat("vm.pmap.pde.demotions"), 1);
    assert!(r.pmap.extract(&r.mem, pm, VirtAddr((1 << 30) + (5 << 21) + 4096)).is_none());
    assert_eq!(r.pmap.extract(&r.mem, pm, VirtAddr((1 << 30) + (6 << 21))).unwrap().shift, 21);
    assert_eq!(r.pmap.extract(&r.mem, pm, VirtAddr((1 << 30) + (5 << 21))).unwrap().shift, 12);
    r.check();
}

#[test]
fn removal_invalidates_every_cpu_running_the_space() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let (p, mut env) = r.env();
    let pm = p.pinit(&mut env).unwrap();
    p.activate(&mut env, pm, 0);
    p.activate(&mut env, pm, 1);
    enter_all(&mut r, pm, &pages[..1], |_| rw_access());
    let asid = r.pmap.asid(pm);
    let t = Translation { pa_base: pages[0].addr().0, shift: 12, perm: perm::READ | perm::USER };
    for c in &mut r.mmu {
        c.tlb.fill(VA, asid, t);
    }
    let (p, mut env) = r.env();
    p.remove(&mut env, pm, VirtAddr(VA), VirtAddr(VA + 4096));
    for c in &mut r.mmu {
        assert!(c.tlb.lookup(VA, asid).is_none(), "stale entry left on a CPU");
    }
    assert_eq!(r.ev.shootdown_ipis, 1, "one IPI to the other CPU");
}

#[test]
fn check_finds_a_mapping_without_a_pv_entry() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let (p, mut env) = r.env();
    let pm = p.pinit(&mut env).unwrap();
    enter_all(&mut r, pm, &pages[..2], |_| rw_access());
    // Corrupt: drop page 1's PV entry behind the pmap's back.
    let (p, mut env) = r.env();
    assert!(p.0.pv.remove(&mut env, pages[1], pm, VA + 4096));
    let e = p.check(&env).unwrap_err();
    assert!(e.contains("no PV entry"), "{e}");
}

/// A 2 MB mapping never accessed (entered by pmap_enter_object) is removed
/// rather than demoted when a 4 KB page is entered under it; if it was the
/// only entry of its page directory, that goes too, and the new page-table
/// page must hang from a new one.
#[test]
fn entering_under_an_unaccessed_superpage_that_was_alone_in_its_directory() {
    let mut r = rig(4096);
    let pages = r.superpage_run();
    let (p, mut env) = r.env();
    let pm = p.pinit(&mut env).unwrap();
    let lookup = |v: VirtAddr| (v.0 >= VA && v.0 < VA + PAGE_2M).then(|| pages[((v.0 - VA) / 4096) as usize]);
    let (p, mut env) = r.env();
    p.enter_object(&mut env, pm, VirtAddr(VA), VirtAddr(VA + PAGE_2M), &lookup, prot::RW);
    assert_eq!(r.stat("vm.pmap.pde.mappings"), 1);
    let (p, mut env) = r.env();
    p.enter(&mut env, pm, VirtAddr(VA + 4096), pages[1], prot::RW, rw_access()).unwrap();
    assert_eq!(r.stat("splab.pmap.pde.demotion_aborts"), 1);
    assert_eq!(r.pmap.extract(&r.mem, pm, VirtAddr(VA + 4096)).map(|m| m.pa), Some(pages[1].addr()));
    r.check();
}

/// pmap_clear_modify on one page of a dirty 2 MB mapping: the superpage is
/// demoted, that page's mapping becomes read-only and clean (its next
/// write must fault), the other 511 keep write access and their dirty
/// state.
#[test]
fn clear_modify_demotes_a_dirty_superpage_and_write_protects_the_page() {
    let mut r = rig(4096);
    let (pages, pm) = promoted(&mut r, prot::RW);
    let (p, env) = r.env();
    assert!(p.is_modified(&env, pages[5]) && p.is_modified(&env, pages[6]));
    let (p, mut env) = r.env();
    p.clear_modify(&mut env, pages[5]);
    assert_eq!(r.stat("vm.pmap.pde.demotions"), 1);
    let m5 = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 5 * 4096)).unwrap();
    let m6 = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 6 * 4096)).unwrap();
    assert_eq!((m5.shift, m5.prot & prot::WRITE, m5.dirty), (12, 0, false));
    assert_eq!((m6.shift, m6.prot & prot::WRITE, m6.dirty), (12, prot::WRITE, true));
    let (p, env) = r.env();
    assert!(!p.is_modified(&env, pages[5]), "page 5 is clean in every mapping");
    assert!(p.is_modified(&env, pages[6]), "page 6 is still dirty");
    // A 4 KB mapping keeps write access and only loses its dirty bit.
    let (p, mut env) = r.env();
    p.clear_modify(&mut env, pages[6]);
    let m6 = r.pmap.extract(&r.mem, pm, VirtAddr(VA + 6 * 4096)).unwrap();
    assert_eq!((m6.prot & prot::WRITE, m6.dirty), (prot::WRITE, false));
    assert_eq!(r.stat("vm.pmap.pde.demotions"), 1);
    r.check();
}

/// pmap_ts_referenced on a 2 MB mapping: every 4 KB page of it reports the
/// superpage's reference, and the shared bit is cleared only when the page
/// selected by the hash is tested, so one test clears it for all.
#[test]
fn ts_referenced_counts_a_superpage_for_each_page_and_clears_it_once() {
    let mut r = rig(4096);
    let (pages, pm) = promoted(&mut r, prot::RW);
    let selected: Vec<usize> = (0..512).filter(|&i| Amd64::selected_for_clearing(pages[i], pm, VA)).collect();
    assert_eq!(selected.len(), 1, "one page in 512 clears the bit");
    let k = selected[0];
    let other = (k + 1) % 512;
    let (p, mut env) = r.env();
    assert_eq!(p.ts_referenced(&mut env, pages[other]), 1);
    assert!(p.is_referenced(&env, pages[k]), "testing another page leaves the bit set");
    assert_eq!(p.ts_referenced(&mut env, pages[k]), 1);
    assert!(!p.is_referenced(&env, pages[other]), "testing the selected page cleared it for all");
    assert_eq!(p.ts_referenced(&mut env, pages[other]), 0);
    assert_eq!(r.stat("vm.pmap.pde.demotions"), 0);
    assert!(r.phys.pages.get(pages[other]).has(pflags::DIRTY), "a dirty superpage dirties the page under test");
    r.check();
}

/// Dropping a superpage whole removes its 2 MB mapping without demotion
/// and the 4 KB mappings other address spaces have of its pages.
#[test]
fn remove_all_superpage_drops_every_mapping_without_demoting() {
    let mut r = rig(4096);
    let (pages, a) = promoted(&mut r, prot::READ);
    let (p, mut env) = r.env();
    let b = p.pinit(&mut env).unwrap();
    p.enter(&mut env, b, VirtAddr(VA + 7 * 4096), pages[7], prot::READ, EnterFlags { access: prot::READ, ..Default::default() }).unwrap();
    p.remove_all_superpage(&mut env, pages[300]);
    assert_eq!(r.stat("vm.pmap.pde.demotions"), 0);
    assert_eq!(r.pmap.0.pv.live(), 0);
    assert!(r.pmap.extract(&r.mem, a, VirtAddr(VA)).is_none());
    assert!(r.pmap.extract(&r.mem, b, VirtAddr(VA + 7 * 4096)).is_none());
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::REFERENCED)), "the reference moved to every page");
    r.check();
}
