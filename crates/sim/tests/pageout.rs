//! Memory pressure end to end on the amd64 system: pages written to swap
//! and read back unchanged, a dirty superpage demoted before part of it is
//! paged out, a clean superpage dropped whole, and the process killed when
//! memory and swap are both exhausted.

use splab_hw::profile::Profile;
use splab_sim::{Config, System};
use splab_vm::map::{Backing, MmapReq};
use splab_vm::object::file_word;
use splab_sim::AccessError;
use splab_vm::{prot, FaultError};

const MB: u64 = 1 << 20;
const PAGE: u64 = 4096;

fn system(memory: u64, swap: u64) -> System {
    let mut c = Config::new(Profile::load("sapphire-rapids").unwrap());
    c.memory = memory;
    c.swap = swap;
    c.track_contents = true;
    c.check_tlb = true;
    System::new(c).unwrap()
}

fn sysctl(s: &System, name: &str) -> i64 {
    s.sysctls().get_int(name).unwrap_or_else(|| panic!("no sysctl {name}"))
}

fn value(page: u64, word: u64) -> u64 {
    (page << 20) ^ (word << 4) ^ 0xa5a5_0001
}

/// The object mapped at `va` in `pid`, and the page index of `va` in it.
fn object_at(s: &System, pid: u32, va: u64) -> (u32, u32) {
    let e = s.kernel().proc(pid).unwrap().map.lookup(va).unwrap();
    (e.object, e.pindex(va, s.page_size().trailing_zeros()) as u32)
}

/// Writes two words in each page of [va, va+len) that `pages` selects.
fn fill(s: &mut System, va: u64, len: u64, pages: impl Fn(u64) -> bool) {
    for p in (0..len / PAGE).filter(|&p| pages(p)) {
        s.store(0, va + p * PAGE, value(p, 0)).unwrap();
        s.store(0, va + p * PAGE + 4088, value(p, 511)).unwrap();
    }
}

fn verify(s: &mut System, va: u64, len: u64, pages: impl Fn(u64) -> bool) {
    for p in 0..len / PAGE {
        let (a, b) = if pages(p) { (value(p, 0), value(p, 511)) } else { (0, 0) };
        assert_eq!(s.load(0, va + p * PAGE).unwrap(), a, "page {p} word 0");
        assert_eq!(s.load(0, va + p * PAGE + 4088).unwrap(), b, "page {p} word 511");
    }
}

/// Memory pressure from 32 MB written in a new 64 MB anonymous mapping,
/// half of every 2 MB block, so that none of it is ever a superpage.
/// Returns where it is and which of its pages were written.
fn pressure(s: &mut System, pid: u32) -> (u64, u64, fn(u64) -> bool) {
    let len = 64 * MB;
    let va = s.mmap(pid, MmapReq::anon(len, prot::RW)).unwrap().0;
    fn half(p: u64) -> bool {
        p % 512 < 256
    }
    fill(s, va, len, half);
    (va, len, half)
}

fn clean(s: &mut System) {
    s.check_invariants().unwrap();
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
}

#[test]
fn pages_written_to_swap_read_back_unchanged() {
    let mut s = system(32 * MB, 64 * MB);
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let len = 48 * MB;
    let va = s.mmap(pid, MmapReq::anon(len, prot::RW)).unwrap().0;
    let every = |_| true;
    fill(&mut s, va, len, every);
    assert!(sysctl(&s, "vm.stats.vm.v_swappgsout") > 0, "48 MB written into 32 MB must page out");
    verify(&mut s, va, len, every);
    assert!(sysctl(&s, "vm.stats.vm.v_swappgsin") > 0);
    assert!(sysctl(&s, "vm.stats.vm.v_swapout") < sysctl(&s, "vm.stats.vm.v_swappgsout"), "pages are written in clusters");
    assert!(sysctl(&s, "vm.reserv.broken") > 0, "reservations are broken to find free pages");
    clean(&mut s);
    s.exit(pid).unwrap();
    assert_eq!(sysctl(&s, "splab.vm.swap_used"), 0, "the exit freed every swap slot");
    assert!(s.oom_kills().is_empty());
    clean(&mut s);
}

#[test]
fn a_dirty_superpage_is_demoted_before_part_of_it_is_paged_out() {
    let mut s = system(32 * MB, 64 * MB);
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let a_len = 4 * MB;
    let a = s.mmap(pid, MmapReq::anon(a_len, prot::RW)).unwrap().0;
    fill(&mut s, a, a_len, |_| true);
    assert_eq!(sysctl(&s, "vm.pmap.pde.promotions"), 2);
    assert_eq!(sysctl(&s, "vm.pmap.pde.demotions"), 0);
    // Only A's superpages can be demoted.
    let (b, b_len, half) = pressure(&mut s, pid);
    let (obj, _) = object_at(&s, pid, a);
    let swapped = s.kernel().objects.get(obj).swblk.len();
    let resident = s.kernel().objects.get(obj).pages.len();
    assert!(swapped > 0 && resident > 0, "part of A is paged out: {swapped} pages on swap, {resident} resident");
    assert!(sysctl(&s, "vm.pmap.pde.demotions") >= 1, "A's superpage was demoted");
    // No 2 MB mapping may cover a page that is not resident.
    for p in 0..a_len / PAGE {
        if let Some(m) = s.mapping(pid, a + p * PAGE) {
            let (o, pi) = object_at(&s, pid, a + p * PAGE);
            assert_eq!(s.kernel().objects.lookup(o, pi).map(|f| f.addr_4k().0), Some(m.pa.0), "page {p} mapped ({}-bit) but not resident there", m.shift);
        }
    }
    clean(&mut s);
    verify(&mut s, a, a_len, |_| true);
    verify(&mut s, b, b_len, half);
    clean(&mut s);
}

#[test]
fn a_clean_superpage_is_dropped_whole() {
    let mut s = system(32 * MB, 64 * MB);
    let file = s.create_file(4 * MB);
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let req = MmapReq { addr: 0, len: 4 * MB, prot: prot::READ, shared: true, fixed: false, backing: Backing::File { file, offset: 0 }, prefault: false };
    let f = s.mmap(pid, req).unwrap().0;
    for p in 0..4 * MB / PAGE {
        assert_eq!(s.load(0, f + p * PAGE).unwrap(), file_word(file, p * PAGE));
    }
    assert_eq!(sysctl(&s, "vm.pmap.pde.promotions"), 2, "the file is mapped by two read-only superpages");
    let pageins = sysctl(&s, "vm.stats.vm.v_vnodepgsin");
    let (b, b_len, half) = pressure(&mut s, pid);
    assert!(sysctl(&s, "splab.vm.pageout.superpages_freed") >= 1, "a clean superpage was freed whole");
    assert_eq!(sysctl(&s, "vm.pmap.pde.demotions"), 0, "without being demoted");
    assert!(sysctl(&s, "vm.reserv.freed") >= 1, "its reservation was freed whole");
    clean(&mut s);
    for p in 0..4 * MB / PAGE {
        assert_eq!(s.load(0, f + p * PAGE + 8).unwrap(), file_word(file, p * PAGE + 8), "page {p} read back from the file");
    }
    assert!(sysctl(&s, "vm.stats.vm.v_vnodepgsin") > pageins);
    verify(&mut s, b, b_len, half);
    clean(&mut s);
}

#[test]
fn exhausting_memory_and_swap_kills_the_largest_process() {
    let mut s = system(16 * MB, 4 * MB);
    let small = s.spawn().unwrap();
    s.run_on(1, small).unwrap();
    let sv = s.mmap(small, MmapReq::anon(MB, prot::RW)).unwrap().0;
    for p in 0..MB / PAGE {
        s.store(1, sv + p * PAGE, value(p, 0)).unwrap();
    }
    let big = s.spawn().unwrap();
    s.run_on(0, big).unwrap();
    let len = 64 * MB;
    let bv = s.mmap(big, MmapReq::anon(len, prot::RW)).unwrap().0;
    let mut failed = None;
    for p in 0..len / PAGE {
        if let Err(e) = s.store(0, bv + p * PAGE, value(p, 0)) {
            failed = Some((p, e));
            break;
        }
    }
    let (p, e) = failed.expect("64 MB cannot fit in 16 MB of memory and 4 MB of swap");
    assert_eq!(e, AccessError::Fault(FaultError::Killed(big)), "after {p} pages");
    let kills = s.oom_kills().to_vec();
    assert_eq!(kills.len(), 1, "{kills:?}");
    assert_eq!((kills[0].pid, kills[0].trigger, kills[0].reason.as_str()), (big, Some(big), "out of swap space"));
    assert!(kills[0].size_pages >= 4096, "{}", kills[0]);
    assert!(kills[0].to_string().starts_with(&format!("pid {big} killed: out of swap space")));
    assert_eq!(sysctl(&s, "splab.vm.oom_kills"), 1);
    // The killed process's accesses keep failing cleanly; the other one
    // carries on with its memory intact.
    assert_eq!(s.load(0, bv), Err(AccessError::Fault(FaultError::Killed(big))));
    assert!(s.run_on(0, big).is_err());
    assert!(s.exit(big).is_err());
    for p in 0..MB / PAGE {
        assert_eq!(s.load(1, sv + p * PAGE).unwrap(), value(p, 0));
    }
    clean(&mut s);
}

/// What `stress --vm 4 --vm-bytes 12M` does, on a machine too small for
/// it: four workers on four CPUs, each allocating, touching every page of
/// and freeing its memory, in turns. They page against each other and all
/// finish, with every value they wrote read back.
#[test]
fn stress_like_workers_page_against_each_other_and_finish() {
    let mut s = system(32 * MB, 64 * MB);
    let len = 12 * MB;
    let workers: Vec<u32> = (0..4).map(|_| s.spawn().unwrap()).collect();
    for (cpu, &w) in workers.iter().enumerate() {
        s.run_on(cpu, w).unwrap();
    }
    for round in 0..2u64 {
        let bases: Vec<u64> = workers.iter().map(|&w| s.mmap(w, MmapReq::anon(len, prot::RW)).unwrap().0).collect();
        // Each worker writes 64 pages per turn, then reads them all back.
        for chunk in 0..len / PAGE / 64 {
            for (cpu, &b) in bases.iter().enumerate() {
                for p in chunk * 64..(chunk + 1) * 64 {
                    s.store(cpu, b + p * PAGE, value(p, round) ^ cpu as u64).unwrap();
                }
            }
        }
        for (cpu, &b) in bases.iter().enumerate() {
            for p in 0..len / PAGE {
                assert_eq!(s.load(cpu, b + p * PAGE).unwrap(), value(p, round) ^ cpu as u64, "worker {cpu} page {p}");
            }
        }
        for (&w, &b) in workers.iter().zip(&bases) {
            s.munmap(w, b, len).unwrap();
        }
    }
    assert!(sysctl(&s, "vm.stats.vm.v_swappgsout") > 0 && sysctl(&s, "vm.stats.vm.v_swappgsin") > 0);
    assert!(s.oom_kills().is_empty(), "{:?}", s.oom_kills());
    assert_eq!(sysctl(&s, "splab.vm.swap_used"), 0, "munmap freed the slots");
    clean(&mut s);
    for w in workers {
        s.exit(w).unwrap();
    }
    clean(&mut s);
}
