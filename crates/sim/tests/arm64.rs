//! End-to-end behaviour of the arm64 system on the Neoverse N1 profile:
//! 64 KB runs promote inside a partially populated 2 MB reservation, the
//! 2 MB block follows, contents survive demotion, a fork's soft faults map
//! whichever size is fully populated, and the TLBs hold 64 KB entries.

use splab_hw::profile::Profile;
use splab_sim::{Config, System};
use splab_vm::map::MmapReq;
use splab_vm::prot;

fn system(memory: u64) -> System {
    let mut c = Config::new(Profile::load("neoverse-n1").unwrap());
    c.memory = memory;
    c.track_contents = true;
    c.check_tlb = true;
    System::new(c).unwrap()
}

fn sysctl(s: &System, name: &str) -> i64 {
    s.sysctls().get_int(name).unwrap_or_else(|| panic!("no sysctl {name}"))
}

#[test]
fn runs_then_blocks_promote_and_contents_survive_demotion() {
    let mut s = system(256 << 20);
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let len = 4u64 << 20;
    let va = s.mmap(pid, MmapReq::anon(len, prot::RW)).unwrap().0;
    // 40 pages: two 64 KB runs complete, the reservation not.
    for p in 0..40 {
        s.store(0, va + p * 4096 + 8, p * 3 + 1).unwrap();
    }
    assert_eq!((sysctl(&s, "vm.pmap.l3c.promotions"), sysctl(&s, "vm.pmap.l2.promotions")), (2, 0));
    // Reading the first run again hits one 64 KB TLB entry.
    let before = s.tlb_report();
    for p in 0..16 {
        assert_eq!(s.load(0, va + p * 4096 + 8).unwrap(), p * 3 + 1);
    }
    let after = s.tlb_report();
    let k64 = after.sizes.iter().position(|n| n == "64K").unwrap();
    assert!(after.l1_hits[k64] + after.l2_hits[k64] > before.l1_hits[k64] + before.l2_hits[k64], "no 64K TLB hits");
    for p in 40..len / 4096 {
        s.store(0, va + p * 4096 + 8, p * 3 + 1).unwrap();
    }
    assert_eq!((sysctl(&s, "vm.pmap.l3c.promotions"), sysctl(&s, "vm.pmap.l2.promotions")), (64, 2));
    // Unmapping one page demotes its block and its run, nothing else.
    s.munmap(pid, va + 4096 * 7, 4096).unwrap();
    assert_eq!((sysctl(&s, "vm.pmap.l2.demotions"), sysctl(&s, "vm.pmap.l3c.demotions")), (1, 1));
    assert!(s.load(0, va + 4096 * 7).is_err(), "unmapped page faults");
    for p in (0..len / 4096).filter(|&p| p != 7) {
        assert_eq!(s.load(0, va + p * 4096 + 8).unwrap(), p * 3 + 1);
    }
    // mprotect of part of the other block forbids writes there only.
    s.mprotect(pid, va + (2 << 20), 4096 * 3, prot::READ).unwrap();
    assert!(s.store(0, va + (2 << 20), 5).is_err());
    s.store(0, va + (2 << 20) + 4096 * 3, 5).unwrap();
    s.check_invariants().unwrap();
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
    s.exit(pid).unwrap();
    s.check_invariants().unwrap();
}

/// After fork, the child's soft faults map a fully populated 2 MB
/// reservation as one block, and a fully populated 64 KB run of a partial
/// reservation as one run (vm_fault_soft_fast stepping psind down).
#[test]
fn fork_soft_faults_map_the_largest_populated_size() {
    let mut s = system(256 << 20);
    let parent = s.spawn().unwrap();
    s.run_on(0, parent).unwrap();
    let va = s.mmap(parent, MmapReq::anon(4 << 20, prot::RW)).unwrap().0;
    for p in 0..512 + 20 {
        s.store(0, va + p * 4096, 100 + p).unwrap();
    }
    let child = s.fork(parent).unwrap();
    s.run_on(1, child).unwrap();
    assert_eq!(s.load(1, va + 4096 * 3).unwrap(), 103);
    assert_eq!(sysctl(&s, "vm.pmap.l2.mappings"), 1);
    assert_eq!(s.load(1, va + (2 << 20) + 4096 * 5).unwrap(), 100 + 512 + 5);
    assert_eq!(sysctl(&s, "vm.pmap.l3c.mappings"), 1);
    assert_eq!(s.load(1, va + (2 << 20) + 4096 * 17).unwrap(), 100 + 512 + 17, "outside any full run: a 4 KB page");
    assert_eq!(sysctl(&s, "vm.pmap.l3c.mappings"), 1);
    // Copy on write through the read-only block.
    s.store(1, va + 4096 * 3, 7).unwrap();
    assert_eq!(s.load(0, va + 4096 * 3).unwrap(), 103, "parent unaffected");
    s.check_invariants().unwrap();
    s.exit(child).unwrap();
    s.check_invariants().unwrap();
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
}

#[test]
fn large_page_shared_memory_maps_1g_blocks() {
    let mut s = system(2 << 30);
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let shm = s.shm_create_largepage(1 << 30).unwrap();
    let backing = splab_vm::Backing::LargePage { shm };
    let va = s.mmap(pid, MmapReq { backing, shared: true, ..MmapReq::anon(1 << 30, prot::RW) }).unwrap().0;
    s.store(0, va + 12345 * 8, 42).unwrap();
    assert_eq!(sysctl(&s, "splab.pmap.l1.mappings"), 1);
    s.munmap(pid, va + (5 << 21) + 4096, 4096).unwrap();
    assert_eq!((sysctl(&s, "vm.pmap.l1.demotions"), sysctl(&s, "vm.pmap.l2.demotions")), (1, 1));
    assert_eq!(s.load(0, va + 12345 * 8).unwrap(), 42);
    s.check_invariants().unwrap();
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
    s.exit(pid).unwrap();
}
