//! What amd64's and riscv's pmaps do alike, tested once on both:
//! promotion and its failures, demotion with and without a stashed
//! page-table page, whole-superpage removal, 1 GB mappings, and the page
//! daemon's operations written once in this module.

use crate::amd64::PmapAmd64;
use crate::refbits;
use crate::riscv::PmapRiscv;
use crate::testrig::{read_access, rw_access, Rig};
use splab_hw::riscv::Mode;
use splab_hw::Pfn;
use splab_vm::page::pflags;
use splab_vm::pmap::{prot, Pmap, PmapId, Psind};

/// A 1 GB-aligned user address both address spaces have (well inside
/// Sv39's 256 GiB).
const VA: u64 = 0x10_0000_0000;
const SP: u64 = 2 << 20;
const PAGE: u64 = 4096;

/// One of the two pmaps with the names of its counters: `sp` is where
/// its 2 MB counters are (vm.pmap.<sp>.* and splab.pmap.<sp>.*).
struct Case<P: Pmap> {
    r: Rig<P>,
    sp: &'static str,
    /// The counter of 1 GB demotions.
    demotions_1g: &'static str,
}

impl<P: Pmap> Case<P> {
    fn stat(&self, group: &str, name: &str) -> i64 {
        self.r.stat(&format!("{group}.pmap.{}.{name}", self.sp))
    }

    /// A 2 MB run mapped at VA in a new address space, every page entered
    /// with `access`, and promoted.
    fn promoted(&mut self, access: splab_vm::pmap::Prot) -> (Vec<Pfn>, PmapId) {
        let (pages, pm) = self.r.mapped_run(VA, |_| splab_vm::pmap::EnterFlags { access, ..Default::default() });
        assert_eq!(self.stat("vm", "promotions"), 1);
        (pages, pm)
    }
}

fn amd64(npages: u64) -> Case<PmapAmd64> {
    Case { r: Rig::new(PmapAmd64::new(npages, true), npages), sp: "pde", demotions_1g: "vm.pmap.pdpe.demotions" }
}

fn riscv(npages: u64) -> Case<PmapRiscv> {
    Case { r: Rig::new(PmapRiscv::new(Mode::Sv39, npages, true), npages), sp: "l2", demotions_1g: "splab.pmap.l1.demotions" }
}

#[test]
fn full_dirty_run_promotes_with_one_pv_entry() {
    fn test<P: Pmap>(mut c: Case<P>) {
        let (pages, pm) = c.promoted(prot::RW);
        let m = c.r.extract(pm, VA + 5 * PAGE + 8).unwrap();
        assert_eq!((m.shift, m.pa.0), (21, pages[5].addr_4k().0 + 8));
        assert_eq!(c.r.stat("splab.pmap.pv_entries"), 1, "512 PV entries became one");
        assert_eq!(c.r.ev.promotions, 1);
        c.r.check();
    }
    test(amd64(4096));
    test(riscv(4096));
}

#[test]
fn promotion_fails_on_mixed_dirty_state_and_write_protects_clean_pages() {
    fn test<P: Pmap>(mut c: Case<P>) {
        // Page 100 is only read: accessed but clean.
        let (_, pm) = c.r.mapped_run(VA, |i| if i == 100 { read_access() } else { rw_access() });
        assert_eq!((c.stat("vm", "promotions"), c.stat("vm", "p_failures")), (0, 1));
        assert_eq!(c.stat("splab", "p_failures.attributes"), 1);
        let m = c.r.extract(pm, VA + 100 * PAGE).unwrap();
        assert_eq!(m.prot & prot::WRITE, 0, "the clean page lost write access so its first write is seen");
        c.r.check();
    }
    test(amd64(4096));
    test(riscv(4096));
}

#[test]
fn promotion_needs_contiguous_frames() {
    fn test<P: Pmap>(mut c: Case<P>) {
        let mut pages = c.r.superpage_run();
        let pm = c.r.pinit();
        pages.swap(3, 4);
        c.r.enter_all(pm, VA, &pages, |_| rw_access());
        assert_eq!(c.stat("vm", "promotions"), 0);
        assert_eq!(c.stat("splab", "p_failures.not_contiguous"), 1);
        c.r.check();
    }
    test(amd64(4096));
    test(riscv(4096));
}

#[test]
fn demotion_reuses_the_stashed_page_table_page() {
    fn test<P: Pmap>(mut c: Case<P>) {
        let (pages, pm) = c.promoted(prot::RW);
        let allocs = c.r.ev.pt_page_allocs;
        c.r.protect(pm, VA + PAGE, VA + 3 * PAGE, prot::READ);
        assert_eq!((c.stat("vm", "demotions"), c.stat("splab", "demotion_ptp_reused")), (1, 1));
        assert_eq!(c.r.ev.pt_page_allocs, allocs, "no page-table page allocated");
        let ro = c.r.extract(pm, VA + PAGE).unwrap();
        let rw = c.r.extract(pm, VA + 3 * PAGE).unwrap();
        assert_eq!((ro.shift, ro.prot & prot::WRITE, rw.prot & prot::WRITE), (12, 0, prot::WRITE));
        assert!(!ro.dirty && rw.dirty, "write protection clears the modified bit with write access");
        assert!(c.r.phys.pages.get(pages[1]).has(pflags::DIRTY), "the modified state went to the page");
        assert_eq!(c.r.stat("splab.pmap.pv_entries"), 512);
        c.r.check();
    }
    test(amd64(4096));
    test(riscv(4096));
}

#[test]
fn direct_mapping_demotion_without_memory_removes_the_mapping() {
    fn test<P: Pmap>(mut c: Case<P>) {
        let pages = c.r.superpage_run();
        let pm = c.r.pinit();
        c.r.enter_psind(pm, VA, pages[0], prot::RW, prot::RW, Psind::new(1)).unwrap();
        assert_eq!(c.stat("vm", "mappings"), 1);
        assert_eq!(c.r.extract(pm, VA).unwrap().shift, 21);
        // Demotion cannot get a page-table page.
        c.r.exhaust_memory();
        c.r.protect(pm, VA, VA + PAGE, prot::READ);
        assert_eq!(c.stat("splab", "demotion_aborts"), 1);
        assert!(c.r.extract(pm, VA + 2 * PAGE).is_none(), "the 2MB mapping is gone, to be refaulted");
        assert_eq!(c.r.stat("splab.pmap.pv_entries"), 0);
        c.r.check();
    }
    test(amd64(2048));
    test(riscv(2048));
}

#[test]
fn removing_a_whole_superpage_does_not_demote_and_frees_its_tables() {
    fn test<P: Pmap>(mut c: Case<P>) {
        let pages = c.r.superpage_run();
        let free0 = c.r.phys.buddy.free_count();
        let pm = c.r.pinit();
        c.r.enter_all(pm, VA, &pages, |_| rw_access());
        c.r.remove(pm, VA, VA + SP);
        assert_eq!(c.stat("vm", "demotions"), 0);
        assert_eq!(c.r.stat("splab.pmap.pv_entries"), 0);
        assert!(pages.iter().all(|&m| c.r.phys.pages.get(m).has(pflags::DIRTY | pflags::REFERENCED)), "state handed to all 512 pages");
        // The stashed table and the tables above it are freed; the root
        // remains.
        assert_eq!(c.r.phys.buddy.free_count(), free0 - 1);
        c.r.check();
    }
    test(amd64(4096));
    test(riscv(4096));
}

#[test]
fn unmapping_part_of_a_superpage_demotes_it() {
    fn test<P: Pmap>(mut c: Case<P>) {
        let (_, pm) = c.promoted(prot::RW);
        c.r.remove(pm, VA + 7 * PAGE, VA + 9 * PAGE);
        assert_eq!(c.stat("vm", "demotions"), 1);
        assert!(c.r.extract(pm, VA + 8 * PAGE).is_none());
        assert_eq!(c.r.extract(pm, VA + 9 * PAGE).unwrap().shift, 12);
        assert_eq!(c.r.stat("splab.pmap.pv_entries"), 510);
        c.r.check();
    }
    test(amd64(4096));
    test(riscv(4096));
}

/// A 1 GB page of large-page memory, mapped at VA.
fn gigabyte<P: Pmap>(c: &mut Case<P>) -> PmapId {
    let base = c.r.large_page_memory();
    let pm = c.r.pinit();
    c.r.enter_psind(pm, VA, base, prot::RW, prot::READ, Psind::new(2)).unwrap();
    pm
}

#[test]
fn one_gigabyte_mapping_demotes_in_two_steps() {
    fn test<P: Pmap>(mut c: Case<P>) {
        let pm = gigabyte(&mut c);
        assert_eq!(c.r.extract(pm, VA + 12345).unwrap().shift, 30);
        c.r.remove(pm, VA + (5 << 21) + PAGE, VA + (5 << 21) + 2 * PAGE);
        assert_eq!((c.r.stat(c.demotions_1g), c.stat("vm", "demotions")), (1, 1));
        assert!(c.r.extract(pm, VA + (5 << 21) + PAGE).is_none());
        assert_eq!(c.r.extract(pm, VA + (6 << 21)).unwrap().shift, 21);
        assert_eq!(c.r.extract(pm, VA + (5 << 21)).unwrap().shift, 12);
        c.r.check();
        c.r.remove(pm, VA, VA + (1 << 30));
        assert!(c.r.extract(pm, VA + (6 << 21)).is_none());
        c.r.check();
    }
    test(amd64(1 << 19));
    test(riscv(1 << 19));
}

/// A 2 MB mapping never accessed (made by pmap_enter_object) is removed
/// rather than demoted when a 4 KB page is entered under it; it was the
/// only entry of its table, which goes too, and the page is mapped from
/// fresh tables.
#[test]
fn entering_under_an_unaccessed_superpage_that_was_alone_in_its_table() {
    fn test<P: Pmap>(mut c: Case<P>) {
        let pages = c.r.superpage_run();
        let pm = c.r.pinit();
        c.r.enter_object(pm, VA, VA + SP, &pages, prot::RW);
        assert_eq!(c.stat("vm", "mappings"), 1);
        c.r.enter(pm, VA + PAGE, pages[1], prot::RW, rw_access()).unwrap();
        assert_eq!(c.stat("splab", "demotion_aborts"), 1);
        assert_eq!(c.r.extract(pm, VA + PAGE).map(|m| (m.pa, m.shift)), Some((pages[1].addr_4k(), 12)));
        c.r.check();
    }
    test(amd64(4096));
    test(riscv(4096));
}

/// pmap_clear_modify on one page of a dirty 2 MB mapping: the superpage
/// is demoted, that page's mapping becomes read-only and clean (its next
/// write must fault), the other 511 keep write access and their dirty
/// state; a 4 KB mapping only loses its modified bit.
#[test]
fn clear_modify_demotes_a_dirty_superpage_and_write_protects_the_page() {
    fn test<P: Pmap>(mut c: Case<P>) {
        let (pages, pm) = c.promoted(prot::RW);
        assert!(c.r.is_modified(pages[5]) && c.r.is_modified(pages[6]));
        c.r.clear_modify(pages[5]);
        assert_eq!(c.stat("vm", "demotions"), 1);
        let m5 = c.r.extract(pm, VA + 5 * PAGE).unwrap();
        let m6 = c.r.extract(pm, VA + 6 * PAGE).unwrap();
        assert_eq!((m5.shift, m5.prot & prot::WRITE, m5.dirty), (12, 0, false));
        assert_eq!((m6.shift, m6.prot & prot::WRITE, m6.dirty), (12, prot::WRITE, true));
        assert!(!c.r.is_modified(pages[5]), "page 5 is clean in every mapping");
        assert!(c.r.is_modified(pages[6]), "page 6 is still dirty");
        c.r.clear_modify(pages[6]);
        let m6 = c.r.extract(pm, VA + 6 * PAGE).unwrap();
        assert_eq!((m6.prot & prot::WRITE, m6.dirty), (prot::WRITE, false));
        assert_eq!(c.stat("vm", "demotions"), 1);
        c.r.check();
    }
    test(amd64(4096));
    test(riscv(4096));
}

/// pmap_ts_referenced on a 2 MB mapping: every 4 KB page of it reports
/// the superpage's reference, and the shared bit is cleared only when the
/// page selected by the hash is tested, so one test clears it for all.
#[test]
fn ts_referenced_counts_a_superpage_for_each_page_and_clears_it_once() {
    fn test<P: Pmap>(mut c: Case<P>) {
        let (pages, pm) = c.promoted(prot::RW);
        let selected: Vec<usize> = (0..512).filter(|&i| refbits::selected_for_clearing(pages[i], pm, VA, 21, 512)).collect();
        assert_eq!(selected.len(), 1, "one page in 512 clears the bit");
        let (k, other) = (selected[0], (selected[0] + 1) % 512);
        assert_eq!(c.r.ts_referenced(pages[other]), 1);
        assert!(c.r.is_referenced(pages[k]), "testing another page leaves the bit set");
        assert_eq!(c.r.ts_referenced(pages[k]), 1);
        assert!(!c.r.is_referenced(pages[other]), "testing the selected page cleared it for all");
        assert_eq!(c.r.ts_referenced(pages[other]), 0);
        assert_eq!(c.stat("vm", "demotions"), 0);
        assert!(c.r.phys.pages.get(pages[other]).has(pflags::DIRTY), "a dirty superpage dirties the page under test");
        c.r.check();
    }
    test(amd64(4096));
    test(riscv(4096));
}

/// Dropping a superpage whole removes its 2 MB mapping without demotion
/// and the 4 KB mappings other address spaces have of its pages.
#[test]
fn remove_all_superpage_drops_every_mapping_without_demoting() {
    fn test<P: Pmap>(mut c: Case<P>) {
        let (pages, a) = c.promoted(prot::RW);
        let b = c.r.pinit();
        c.r.enter(b, VA + 7 * PAGE, pages[7], prot::READ, read_access()).unwrap();
        c.r.remove_all_superpage(pages[300]);
        assert_eq!(c.stat("vm", "demotions"), 0);
        assert_eq!(c.r.stat("splab.pmap.pv_entries"), 0);
        assert!(c.r.extract(a, VA).is_none());
        assert!(c.r.extract(b, VA + 7 * PAGE).is_none());
        assert!(pages.iter().all(|&m| c.r.phys.pages.get(m).has(pflags::DIRTY | pflags::REFERENCED)), "the state moved to every page");
        c.r.check();
    }
    test(amd64(4096));
    test(riscv(4096));
}
