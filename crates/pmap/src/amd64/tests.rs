//! Direct tests of what only the amd64 pmap does: promotion's need for
//! accessed entries, TLB shootdown to every CPU running the address space
//! (with PCIDs), and the checker. What it does as riscv's pmap does is
//! tested on both in `crate::pte`'s tests.

use super::*;
use crate::testrig::{rw_access, user_read_4k, Rig};
use splab_vm::pmap::Pmap;

const VA: u64 = 0x40_0000_0000;

fn rig(npages: u64) -> Rig<PmapAmd64> {
    Rig::new(PmapAmd64::new(npages, true), npages)
}

#[test]
fn promotion_needs_every_page_accessed() {
    let mut r = rig(4096);
    // The first page is entered without an access (a prefault): A clear.
    r.mapped_run(VA, |i| if i == 0 { EnterFlags::default() } else { rw_access() });
    assert_eq!(r.stat("vm.pmap.pde.promotions"), 0);
    assert_eq!(r.stat("splab.pmap.pde.p_failures.not_accessed"), 1);
}

#[test]
fn removal_invalidates_every_cpu_running_the_space() {
    let mut r = rig(4096);
    let (pages, pm) = r.mapped_on_both_cpus(VA, 1);
    let asid = r.pmap.asid(pm);
    let t = user_read_4k(pages[0]);
    r.fill_tlbs(VA, asid, t);
    r.remove(pm, VA, VA + 4096);
    assert!(!r.tlb_holds(VA, asid), "stale entry left on a CPU");
    assert_eq!(r.ev.shootdown_ipis, 1, "one IPI to the other CPU");
}

#[test]
fn check_finds_a_mapping_without_a_pv_entry() {
    let mut r = rig(4096);
    let (pages, pm) = r.mapped_first(VA, 2, |_| rw_access());
    // Corrupt: drop page 1's PV entry behind the pmap's back.
    r.assert_check_finds("no PV entry", |p, env| assert!(p.0.pv.remove(env, pages[1], pm, VA + 4096)));
}
