//! End-to-end behaviour of the amd64 system: promotion after a region is
//! fully touched, contents kept across promotion, demotion and COW.

use splab_hw::profile::Profile;
use splab_sim::Op;
use splab_sim::{Config, System};
use splab_vm::map::MmapReq;
use splab_vm::prot;

fn system(superpages: bool) -> System {
    let mut c = Config::new(Profile::load("sapphire-rapids").unwrap());
    c.memory = 256 << 20;
    c.superpages = superpages;
    c.track_contents = true;
    c.check_tlb = true;
    System::new(c).unwrap()
}

fn sysctl(s: &System, name: &str) -> i64 {
    s.sysctls().get_int(name).unwrap_or_else(|| panic!("no sysctl {name}"))
}

#[test]
fn touching_a_region_promotes_it_and_contents_survive() {
    let mut s = system(true);
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let len = 8u64 << 20;
    let va = s.mmap(pid, MmapReq::anon(len, prot::RW)).unwrap().0;
    assert_eq!(va % (2 << 20), 0, "superpage-sized mappings are 2MB aligned");
    for p in 0..len / 4096 {
        s.store(0, va + p * 4096 + 8, p * 3 + 1).unwrap();
    }
    assert_eq!(sysctl(&s, "vm.pmap.pde.promotions"), 4);
    assert_eq!(sysctl(&s, "vm.reserv.fullpop"), 4);
    for p in 0..len / 4096 {
        assert_eq!(s.load(0, va + p * 4096 + 8).unwrap(), p * 3 + 1);
    }
    // Unmapping one page inside a superpage demotes it.
    s.munmap(pid, va + 4096 * 7, 4096).unwrap();
    assert_eq!(sysctl(&s, "vm.pmap.pde.demotions"), 1);
    assert!(s.load(0, va + 4096 * 7).is_err(), "unmapped page faults");
    assert_eq!(s.load(0, va + 4096 * 8 + 8).unwrap(), 8 * 3 + 1);
    // mprotect part of another superpage demotes it and forbids writes.
    s.mprotect(pid, va + (2 << 20), 4096 * 3, prot::READ).unwrap();
    assert_eq!(sysctl(&s, "vm.pmap.pde.demotions"), 2);
    assert!(s.store(0, va + (2 << 20), 5).is_err());
    assert_eq!(s.load(0, va + (2 << 20) + 8).unwrap(), 512 * 3 + 1);
    s.check_invariants().unwrap();
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
    s.exit(pid).unwrap();
    s.check_invariants().unwrap();
    assert_eq!(sysctl(&s, "vm.reserv.fullpop"), 0);
}

#[test]
fn no_promotions_with_superpages_off() {
    let mut s = system(false);
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let len = 4u64 << 20;
    let va = s.mmap(pid, MmapReq::anon(len, prot::RW)).unwrap().0;
    for p in 0..len / 4096 {
        s.store(0, va + p * 4096, p).unwrap();
    }
    assert_eq!(sysctl(&s, "vm.pmap.pde.promotions"), 0);
    assert_eq!(sysctl(&s, "vm.reserv.fullpop"), 2, "reservations are made whatever the pmap does");
}

#[test]
fn fork_copies_on_write_and_maps_superpages_read_only() {
    let mut s = system(true);
    let parent = s.spawn().unwrap();
    s.run_on(0, parent).unwrap();
    let len = 4u64 << 20;
    let va = s.mmap(parent, MmapReq::anon(len, prot::RW)).unwrap().0;
    for p in 0..len / 4096 {
        s.store(0, va + p * 4096, 100 + p).unwrap();
    }
    let child = s.fork(parent).unwrap();
    s.run_on(1, child).unwrap();
    // The child's read maps the fully populated superpage at once.
    assert_eq!(s.load(1, va + 4096 * 3).unwrap(), 103);
    assert_eq!(sysctl(&s, "vm.pmap.pde.mappings"), 1);
    s.store(1, va + 4096 * 3, 7).unwrap();
    assert_eq!(s.load(1, va + 4096 * 3).unwrap(), 7);
    assert_eq!(s.load(0, va + 4096 * 3).unwrap(), 103, "parent unaffected");
    s.store(0, va + 4096 * 5, 9).unwrap();
    assert_eq!(s.load(1, va + 4096 * 5).unwrap(), 105, "child unaffected");
    s.check_invariants().unwrap();
    s.exit(child).unwrap();
    assert_eq!(s.load(0, va + 4096 * 5).unwrap(), 9);
    s.check_invariants().unwrap();
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
}

#[test]
fn adjacent_small_mappings_share_an_object_and_promote_together() {
    let mut s = system(true);
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    // Place the first at a 2 MB boundary so both halves make one superpage.
    let mut req = MmapReq::anon(1 << 20, prot::RW);
    req.addr = 0x7000_0000_0000 - (2 << 20) * 8;
    req.fixed = true;
    let a = s.mmap(pid, req).unwrap().0;
    let b = s.mmap(pid, MmapReq { addr: a + (1 << 20), ..req }).unwrap().0;
    assert_eq!(b, a + (1 << 20));
    assert_eq!(s.kernel().proc(pid).unwrap().map.entries.len(), 1, "the second mapping extended the first entry");
    for p in 0..512u64 {
        s.store(0, a + p * 4096, p).unwrap();
    }
    assert_eq!(sysctl(&s, "vm.pmap.pde.promotions"), 1);
    assert_eq!(s.load(0, b + 4096).unwrap(), 257);
    // A mapping with another protection gets its own entry on the same object.
    let c = s.mmap(pid, MmapReq { addr: a + (2 << 20), prot: prot::READ, ..req }).unwrap().0;
    let m = &s.kernel().proc(pid).unwrap().map;
    assert_eq!(m.entries.len(), 2);
    assert_eq!(m.entries[&a].object, m.entries[&c].object);
    assert_eq!(s.load(0, c + 8).unwrap(), 0);
    s.check_invariants().unwrap();
    s.exit(pid).unwrap();
}

#[test]
fn unmapping_part_of_a_coalesced_mapping_frees_its_pages() {
    let mut s = system(false);
    let free = s.free_pages();
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    // Two adjacent mappings become one entry on one object.
    let a = s.mmap(pid, MmapReq::anon(4 << 20, prot::RW)).unwrap().0;
    let b = s.mmap(pid, MmapReq { addr: a + (4 << 20), ..MmapReq::anon(4 << 20, prot::RW) }).unwrap().0;
    assert_eq!(b, a + (4 << 20));
    for p in 0..2048u64 {
        s.store(0, a + p * 4096, p).unwrap();
    }
    let touched = s.free_pages();
    // The first half goes while the second is still mapped: its 1024
    // pages are free again at once (vm_map_entry_delete with
    // OBJ_ONEMAPPING), not when the object dies; so are the page-table
    // pages that mapped only them.
    s.munmap(pid, a, 4 << 20).unwrap();
    let freed = s.free_pages() - touched;
    assert!((1024..1024 + 4).contains(&freed), "{freed} pages freed");
    assert_eq!(s.load(0, b + 4096 * 5).unwrap(), 1029);
    s.exit(pid).unwrap();
    assert_eq!(s.free_pages(), free);
}

#[test]
fn large_page_shared_memory_maps_1g_pages_and_demotes_on_partial_unmap() {
    let mut c = Config::new(Profile::load("sapphire-rapids").unwrap());
    c.memory = 2 << 30;
    c.track_contents = true;
    c.check_tlb = true;
    let mut s = System::new(c).unwrap();
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let shm = s.shm_create_largepage(1 << 30).unwrap();
    let backing = splab_vm::Backing::LargePage { shm };
    let private = MmapReq { backing, ..MmapReq::anon(1 << 30, prot::RW) };
    assert_eq!(s.mmap(pid, private), Err(splab_vm::Errno::EINVAL), "large pages are shared only");
    let va = s.mmap(pid, MmapReq { shared: true, ..private }).unwrap().0;
    assert_eq!(va % (1 << 30), 0);
    s.store(0, va + 12345 * 8, 77).unwrap();
    let m = s.mapping(pid, va + 4096).unwrap();
    assert_eq!(m.shift, 30, "one 1 GB mapping");
    assert_eq!(sysctl(&s, "splab.pmap.pdpe.mappings"), 1);
    // Unmapping one page demotes 1 GB -> 2 MB -> 4 KB around it.
    s.munmap(pid, va + (3 << 21) + 4096, 4096).unwrap();
    assert_eq!(sysctl(&s, "vm.pmap.pdpe.demotions"), 1);
    assert!(s.load(0, va + (3 << 21) + 4096).is_err());
    assert_eq!(s.load(0, va + 12345 * 8).unwrap(), 77);
    assert_eq!(s.hw().stale_translations, 0, "{:?}", s.stale_samples);
    let free = s.free_pages();
    s.exit(pid).unwrap();
    // The run is still held by the shm object, not the exited process.
    assert!(s.free_pages() < free + (1 << 18));
}

#[test]
fn batched_updates_match_single_loads_and_stores() {
    // Batches on the timing thread, batches timed on the caller's thread,
    // and one access at a time; with no loop, and in a straight loop of
    // a load and a store (the core's own path for a synthetic loop's
    // batches); over 64 MB, over 4 KB, where an update's load is often
    // on the line of the update before, and (span 0) two words of each
    // page in turn, where the first store to a page walks (so it is no
    // repeat of its load) and the next update's load repeats it.
    let run = |batched: bool, threaded: bool, looped: bool, span: u64| {
        let mut c = Config::new(Profile::load("sapphire-rapids").unwrap());
        c.memory = 512 << 20;
        c.timing_thread = threaded;
        let mut s = System::new(c).unwrap();
        let pid = s.spawn().unwrap();
        s.run_on(0, pid).unwrap();
        if looped {
            use splab_sim::block::{BlockSpec, Dep, RefKind, Src, ALU};
            let mut b = BlockSpec::looped(0x40_0000, 9);
            let addr = Dep::new(Src::Dispatch, [3, 0, 0, 0, 0, 0]);
            let l = b.reference(4, RefKind::Load, &[addr], &[]);
            b.reference(4, RefKind::Store, &[addr], &[Dep::new(Src::Ref(l), ALU)]);
            b.other_loads = 1;
            b.other_stores = 1;
            let id = s.define_block(&b).unwrap();
            s.set_loop(0, Some(id));
        }
        let len = 64u64 << 20;
        let va = s.mmap(pid, MmapReq::anon(len, prot::RW)).unwrap().0;
        let len = if span == 0 { len } else { len.min(span) };
        let mut x = 7u64;
        let ops: Vec<(u64, u64)> = (0..40_000u64)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if span == 0 {
                    (va + (i / 2 * 4096) % len + i % 2 * 8, x)
                } else {
                    ((va + (x % len)) & !7, x)
                }
            })
            .collect();
        for chunk in ops.chunks(1000) {
            if batched {
                s.xor_batch(0, chunk).unwrap();
            } else {
                for &(a, v) in chunk {
                    let old = s.load(0, a).unwrap();
                    s.store(0, a, old ^ v).unwrap();
                }
            }
        }
        let t = s.tlb_report();
        let h = s.hw();
        (s.cycles(0), h.refs, h.loads, h.stores, h.walks, h.cache_hits, h.dram_accesses, t.l1_hits, t.l2_hits, t.misses)
    };
    for span in [64 << 20, 4096, 0] {
        for looped in [false, true] {
            let single = run(false, true, looped, span);
            assert_eq!(run(true, true, looped, span), single, "looped: {looped}, span {span}");
            assert_eq!(run(true, false, looped, span), single, "looped: {looped}, span {span}");
        }
    }
}

/// What a run leaves: a digest of memory, cycles, the hardware counters
/// and the TLB's hits and misses by size.
type Outcome = (u64, f64, u64, u64, u64, u64, [u64; 3], u64, Vec<u64>, Vec<u64>, Vec<u64>, u64);

/// The counters, cycles and memory contents of `ops(va, len)` on a 16 MB
/// mapping at va, made in batches of 700 (as a trace replay makes them)
/// and one access at a time.
fn batched_and_single(ops: impl Fn(u64, u64) -> Vec<(u64, Op)>) -> [Outcome; 2] {
    batched_and_single_on(Profile::load("sapphire-rapids").unwrap(), ops)
}

/// `batched_and_single` on profile `p`.
fn batched_and_single_on(p: Profile, ops: impl Fn(u64, u64) -> Vec<(u64, Op)>) -> [Outcome; 2] {
    [true, false].map(|batched| {
        let mut c = Config::new(p.clone());
        c.memory = 512 << 20;
        c.track_contents = true;
        let mut s = System::new(c).unwrap();
        let pid = s.spawn().unwrap();
        s.run_on(0, pid).unwrap();
        let len = 16u64 << 20;
        let va = s.mmap(pid, MmapReq::anon(len, prot::RW)).unwrap().0;
        let ops = ops(va, len);
        let mut seen = 0u64;
        for chunk in ops.chunks(700) {
            if batched {
                s.access_batch(0, chunk).unwrap();
            } else {
                for &(a, op) in chunk {
                    s.access(0, a, op, false).unwrap();
                }
            }
        }
        for &(a, _) in ops.iter().step_by(97) {
            seen = seen.wrapping_mul(31).wrapping_add(s.load(0, a).unwrap());
        }
        let t = s.tlb_report();
        let h = s.hw();
        (seen, s.cycles(0), h.refs, h.loads, h.stores, h.walks, h.cache_hits, h.dram_accesses, t.l1_hits, t.l2_hits, t.misses, h.writebacks)
    })
}

/// A xorshift stream of 30 000 (address, value) pairs in [va, va + len).
fn random_words(va: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
    let mut x = 11u64;
    (0..30_000u64).map(move |i| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Runs of neighbouring words, as streams make.
        let a = (va + ((x >> 8) % len)) & !7;
        (va + (a - va + 8 * (i % 4)) % len, x)
    })
}

/// Loads and stores in batches leave the same counters, cycles and memory
/// contents as one access at a time.
#[test]
fn access_batches_match_single_accesses() {
    let [a, b] = batched_and_single(|va, len| random_words(va, len).map(|(a, x)| (a, if x & 3 == 0 { Op::Store(x) } else { Op::Load })).collect());
    assert_ne!(a.0, 0, "stores were kept");
    assert_eq!(a, b);
}

/// Runs of accesses on one line, loads and stores mixed (which a batch
/// times as repeats of the first where it can: stores after a load
/// among them), as one access at a time; also where dirty lines are
/// written back (a last level small enough to evict them).
#[test]
fn same_line_runs_in_batches_match_single_accesses() {
    let mut wb = Profile::load("sapphire-rapids").unwrap();
    wb.memory.writeback_ns = Some(3.0);
    wb.cache.l3 = splab_hw::cache::CacheConfig { size_kb: 128, ways: 16, latency: 40 };
    for p in [Profile::load("sapphire-rapids").unwrap(), wb.clone()] {
        same_line_runs_on(p);
    }
    // Read-modify-writes (a load and a store of one word, as GUPS's
    // updates make): the stores dirty their lines, written back later.
    let [a, b] = batched_and_single_on(wb, |va, len| random_words(va, len).flat_map(|(a, x)| [(a, Op::Load), (a, Op::Store(x))]).collect());
    assert!(a.11 > 1000, "lines written back: {}", a.11);
    assert_eq!(a, b);
}

fn same_line_runs_on(p: Profile) {
    let [a, b] = batched_and_single_on(p, |va, len| {
        random_words(va, len)
            .take(5000)
            .flat_map(|(a, x)| {
                let line = a & !63;
                (0..6u64).map(move |k| (line + 8 * ((x >> k) & 7), if (x >> (8 + k)) & 3 == 0 { Op::Store(x ^ k) } else { Op::Load }))
            })
            .collect()
    });
    assert_ne!(a.0, 0, "stores were kept");
    assert_eq!(a, b);
}
