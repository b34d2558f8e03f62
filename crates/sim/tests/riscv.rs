//! End-to-end behaviour of the riscv system on the SiFive U74 profile:
//! promotion after a region is fully touched, contents kept across
//! promotion and demotion, accessed/dirty bits maintained by pmap_fault
//! when the hardware leaves them to software (and by the walker when the
//! profile says it sets them), 1 GB pages, Sv48, and profile checks.

use splab_hw::mmu::AdUpdate;
use splab_hw::profile::Profile;
use splab_sim::{Config, System};
use splab_vm::map::MmapReq;
use splab_vm::{prot, Advice};

fn config(arch: &str) -> Config {
    let mut c = Config::new(Profile::load("sifive-u74").unwrap());
    c.arch = splab_pmap::arch::lookup(arch).unwrap();
    c.memory = 256 << 20;
    c.track_contents = true;
    c.check_tlb = true;
    c
}

fn sysctl(s: &System, name: &str) -> i64 {
    s.sysctls().get_int(name).unwrap_or_else(|| panic!("no sysctl {name}"))
}

fn dirty(s: &System, pid: u32, va: u64) -> bool {
    s.mapping(pid, va).unwrap().dirty
}

#[test]
fn touching_a_region_promotes_it_and_contents_survive() {
    let mut s = System::new(config("riscv")).unwrap();
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let len = 8u64 << 20;
    let va = s.mmap(pid, MmapReq::anon(len, prot::RW)).unwrap().0;
    assert_eq!(va % (2 << 20), 0, "superpage-sized mappings are 2MB aligned");
    for p in 0..len / 4096 {
        s.store(0, va + p * 4096 + 8, p * 3 + 1).unwrap();
    }
    assert_eq!(sysctl(&s, "vm.pmap.l2.promotions"), 4);
    s.run_on(1, pid).unwrap();
    for p in 0..len / 4096 {
        assert_eq!(s.load(1, va + p * 4096 + 8).unwrap(), p * 3 + 1);
    }
    // Unmapping one page inside a superpage demotes it.
    s.munmap(pid, va + 4096 * 7, 4096).unwrap();
    assert_eq!(sysctl(&s, "vm.pmap.l2.demotions"), 1);
    assert!(s.load(0, va + 4096 * 7).is_err(), "unmapped page faults");
    assert_eq!(s.load(0, va + 4096 * 8 + 8).unwrap(), 8 * 3 + 1);
    // mprotect of part of another superpage demotes it and forbids writes.
    s.mprotect(pid, va + (2 << 20), 4096 * 3, prot::READ).unwrap();
    assert_eq!(sysctl(&s, "vm.pmap.l2.demotions"), 2);
    assert!(s.store(0, va + (2 << 20), 5).is_err());
    assert_eq!(s.load(1, va + (2 << 20) + 8).unwrap(), 512 * 3 + 1);
    s.check_invariants().unwrap();
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
    s.exit(pid).unwrap();
    s.check_invariants().unwrap();
}

#[test]
fn without_svadu_a_write_after_a_read_is_resolved_by_pmap_fault() {
    let mut s = System::new(config("riscv")).unwrap();
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let va = s.mmap(pid, MmapReq::anon(4096, prot::RW)).unwrap().0;
    assert_eq!(s.load(0, va).unwrap(), 0);
    assert!(!dirty(&s, pid, va), "entered for a read: clean");
    let faults = s.events().faults;
    s.store(0, va, 42).unwrap();
    assert_eq!(s.events().faults, faults, "no vm_fault for the dirty bit");
    assert_eq!((s.events().pmap_faults, sysctl(&s, "splab.pmap.ad_faults")), (1, 1));
    assert!(dirty(&s, pid, va));
    // MADV_FREE clears A and D: the next load and store fault again.
    s.madvise(pid, va, 4096, Advice::Free).unwrap();
    assert_eq!(s.load(0, va).unwrap(), 42);
    s.store(0, va, 43).unwrap();
    assert_eq!(s.events().pmap_faults, 3);
    assert_eq!(s.events().faults, faults);
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
}

#[test]
fn with_svadu_the_walker_sets_the_dirty_bit() {
    let mut c = config("riscv");
    c.profile.ad_update = Some(AdUpdate::Hardware);
    let mut s = System::new(c).unwrap();
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let va = s.mmap(pid, MmapReq::anon(4096, prot::RW)).unwrap().0;
    s.load(0, va).unwrap();
    s.store(0, va, 42).unwrap();
    assert!(dirty(&s, pid, va));
    assert_eq!(s.events().pmap_faults, 0);
    assert_eq!(s.hw().dirty_assists, 1, "the store re-walked to set D");
}

#[test]
fn fork_copies_on_write_across_superpages() {
    let mut s = System::new(config("riscv")).unwrap();
    let parent = s.spawn().unwrap();
    s.run_on(0, parent).unwrap();
    let len = 4u64 << 20;
    let va = s.mmap(parent, MmapReq::anon(len, prot::RW)).unwrap().0;
    for p in 0..len / 4096 {
        s.store(0, va + p * 4096, 100 + p).unwrap();
    }
    let child = s.fork(parent).unwrap();
    s.run_on(1, child).unwrap();
    assert_eq!(s.load(1, va + 4096 * 3).unwrap(), 103);
    assert_eq!(sysctl(&s, "vm.pmap.l2.mappings"), 1, "the child maps the populated superpage at once");
    s.store(1, va + 4096 * 3, 7).unwrap();
    assert_eq!(s.load(0, va + 4096 * 3).unwrap(), 103, "parent unaffected");
    s.store(0, va + 4096 * 5, 9).unwrap();
    assert_eq!(s.load(1, va + 4096 * 5).unwrap(), 105, "child unaffected");
    s.exit(child).unwrap();
    assert_eq!(s.load(0, va + 4096 * 5).unwrap(), 9);
    s.check_invariants().unwrap();
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
}

#[test]
fn large_page_shared_memory_maps_1g_pages() {
    let mut c = config("riscv");
    c.memory = 2 << 30;
    let mut s = System::new(c).unwrap();
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let shm = s.shm_create_largepage(1 << 30).unwrap();
    let req = MmapReq { backing: splab_vm::Backing::LargePage { shm }, shared: true, ..MmapReq::anon(1 << 30, prot::RW) };
    let va = s.mmap(pid, req).unwrap().0;
    s.store(0, va + 12345 * 8, 77).unwrap();
    assert_eq!(s.mapping(pid, va + 4096).unwrap().shift, 30);
    s.munmap(pid, va + (3 << 21) + 4096, 4096).unwrap();
    assert_eq!((sysctl(&s, "splab.pmap.l1.demotions"), sysctl(&s, "vm.pmap.l2.demotions")), (1, 1));
    assert_eq!(s.load(0, va + 12345 * 8).unwrap(), 77);
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
    s.exit(pid).unwrap();
}

#[test]
fn sv48_runs_on_the_same_machine() {
    let mut s = System::new(config("riscv-sv48")).unwrap();
    assert_eq!(s.kernel().pmap.max_user_address(), 1 << 47);
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let mut req = MmapReq::anon(2 << 20, prot::RW);
    req.addr = 0x7000_0000_0000;
    req.fixed = true;
    let va = s.mmap(pid, req).unwrap().0;
    for p in 0..512 {
        s.store(0, va + p * 4096, p).unwrap();
    }
    assert_eq!(sysctl(&s, "vm.pmap.l2.promotions"), 1);
    assert_eq!(sysctl(&s, "vm.pmap.mode"), 1);
    assert_eq!(s.load(0, va + 9 * 4096).unwrap(), 9);
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
}

#[test]
fn profiles_and_architectures_must_agree() {
    let e = System::new(config("amd64")).err().unwrap();
    assert!(e.contains("sifive-u74") && e.contains("riscv"), "{e}");
    let mut c = Config::new(Profile::load("sapphire-rapids").unwrap());
    c.memory = 64 << 20;
    c.profile.ad_update = Some(AdUpdate::Fault);
    let e = System::new(c).err().unwrap();
    assert!(e.contains("ad_update"), "{e}");
}
