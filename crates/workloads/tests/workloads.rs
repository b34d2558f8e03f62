//! Every workload on a small machine: it runs to the end, prints its report
//! in the original tool's shape, and gives a positive figure. Sizes are the
//! smallest that still exercise what each workload is for (forks, threads,
//! time slicing, out of memory), so the whole file stays within seconds.

use splab_sim::{Config, System};
use splab_workloads::build::Build;
use splab_workloads::bw::{Bw, TESTS};
use splab_workloads::gups_mp::GupsMp;
use splab_workloads::index::Index;
use splab_workloads::lat::{Lat, Pattern};
use splab_workloads::realloc::Realloc;
use splab_workloads::stream::Stream;
use splab_workloads::stress::Stress;
use splab_workloads::transpose::Transpose;
use splab_workloads::{Workload, WorkloadResult};

fn system(memory: u64, superpages: bool, track_contents: bool) -> System {
    let mut c = Config::new(splab_hw::profile::Profile::load("sapphire-rapids").unwrap());
    c.memory = memory;
    c.superpages = superpages;
    c.track_contents = track_contents;
    System::new(c).unwrap()
}

fn run(w: &mut dyn Workload, sys: &mut System) -> WorkloadResult {
    let mut last = 0;
    let r = w.run(sys, &mut |n| last = n).unwrap_or_else(|e| panic!("{}: {e}", w.name()));
    assert!(r.figure.value.is_finite() && r.figure.value > 0.0, "{}: figure {:?}", w.name(), r.figure);
    assert!(r.timed_seconds > 0.0, "{}", w.name());
    assert!(last > 0, "{}: no progress reported", w.name());
    r
}

fn promotions(sys: &System) -> i64 {
    sys.sysctls().get_int("vm.pmap.pde.promotions").unwrap()
}

/// Lines of `report` that are two numbers, as lmbench prints results.
fn number_pairs(report: &str) -> Vec<(f64, f64)> {
    report
        .lines()
        .filter_map(|l| {
            let mut it = l.split(' ');
            let a = it.next()?.parse().ok()?;
            let b = it.next()?.parse().ok()?;
            it.next().is_none().then_some((a, b))
        })
        .collect()
}

#[test]
fn lat_prints_a_curve_per_stride_and_follows_pointers_in_memory() {
    for (pattern, track) in [(Pattern::Random, true), (Pattern::Seq, false)] {
        let mut sys = system(256 << 20, true, track);
        let mut l = Lat::new(1 << 20, vec![64, 512], pattern, 500).unwrap();
        let r = run(&mut l, &mut sys);
        assert!(r.report.contains("\"stride=64\n") && r.report.contains("\"stride=512\n"), "{}", r.report);
        let pts = number_pairs(&r.report);
        assert_eq!(pts.len(), 2 * l.sizes().len(), "{}", r.report);
        assert!(pts.iter().all(|&(mb, ns)| mb > 0.0 && ns > 0.0));
        // The smallest array is in the first-level cache; 1 MB is not.
        assert!(pts[0].1 < pts[l.sizes().len() - 1].1, "{}", r.report);
        assert!(!r.figure.higher_is_better);
    }
}

#[test]
fn bw_prints_one_lmbench_line_per_test() {
    let mut sys = system(256 << 20, true, false);
    let mut b = Bw::new(256 << 10, TESTS.iter().map(|s| s.to_string()).collect()).unwrap();
    let r = run(&mut b, &mut sys);
    let pts = number_pairs(&r.report);
    assert_eq!(pts.len(), TESTS.len(), "{}", r.report);
    assert!(pts.iter().all(|&(mb, rate)| mb == 0.25 && rate > 0.0), "{}", r.report);
    for t in TESTS {
        assert!(r.report.contains(&format!("# {t}:")), "{t} missing:\n{}", r.report);
    }
    assert_eq!(r.figure.name, "rd MB/s");
}

#[test]
fn transpose_reports_both_variants_per_size() {
    let mut sys = system(256 << 20, true, false);
    let mut t = Transpose::new(vec![64, 96]).unwrap();
    let r = run(&mut t, &mut sys);
    for n in ["64", "96"] {
        for v in ["load", "store"] {
            assert!(r.report.lines().any(|l| l.split_whitespace().take(2).eq([n, v])), "{n} {v}:\n{}", r.report);
        }
    }
}

#[test]
fn stream_prints_streams_table() {
    let mut sys = system(256 << 20, true, false);
    let mut s = Stream::new(50_000, 3).unwrap();
    let r = run(&mut s, &mut sys);
    assert!(r.report.contains("Function    Best Rate MB/s  Avg time     Min time     Max time"), "{}", r.report);
    for k in ["Copy:", "Scale:", "Add:", "Triad:"] {
        let line = r.report.lines().find(|l| l.starts_with(k)).unwrap_or_else(|| panic!("no {k}"));
        let nums: Vec<f64> = line.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect();
        assert_eq!(nums.len(), 4, "{line}");
        assert!(nums[0] > 0.0 && nums[2] <= nums[1] && nums[1] <= nums[3], "{line}");
    }
    assert_eq!(r.figure.name, "Triad MB/s");
}

#[test]
fn gups_mp_runs_a_table_per_process_and_time_slices_extra_ones() {
    let mut sys = system(256 << 20, true, false);
    let mut g = GupsMp::new(12, None).unwrap();
    let r = run(&mut g, &mut sys);
    assert!(r.report.contains("4 processes on 4 CPUs"), "{}", r.report);
    assert!(r.report.contains("Context switches  = 0"), "{}", r.report);
    // Six processes on four CPUs: two CPUs switch between two each.
    let mut sys = system(256 << 20, true, false);
    let mut g = GupsMp::new(14, Some(6)).unwrap();
    g.quanta.slice = 4 * g.quanta.quantum;
    let r = run(&mut g, &mut sys);
    assert!(r.report.contains("6 processes on 4 CPUs"), "{}", r.report);
    assert!(!r.report.contains("Context switches  = 0"), "{}", r.report);
    assert!(r.report.contains("[GUP/s] (aggregate of 6)"), "{}", r.report);
}

#[test]
fn index_prints_pgbench_summary() {
    let mut sys = system(512 << 20, true, false);
    let mut i = Index::new(1, 2, 300).unwrap();
    let r = run(&mut i, &mut sys);
    for l in ["transaction type: <builtin: select only>", "scaling factor: 1", "number of clients: 2", "number of transactions actually processed: 600/600"] {
        assert!(r.report.contains(l), "no {l:?} in\n{}", r.report);
    }
    let tps = r.report.lines().find_map(|l| l.strip_prefix("tps = ")).unwrap();
    assert!(tps.split(' ').next().unwrap().parse::<f64>().unwrap() > 0.0);
    // The backends mapped the shared buffers with superpages at once.
    assert!(sys.vm_stats().soft_fast_superpage > 0);
}

#[test]
fn build_forks_execs_and_shoots_down_tlbs_of_link_threads() {
    let mut sys = system(512 << 20, true, false);
    let mut b = Build::new(5, Some(2)).unwrap();
    let ipis = sys.events().shootdown_ipis;
    let r = run(&mut b, &mut sys);
    assert!(r.report.contains(" real ") && r.report.contains(" user ") && r.report.contains(" sys"), "{}", r.report);
    assert_eq!(sys.vm_stats().v_forks, 6, "five compilers and the link");
    assert!(sys.events().shootdown_ipis > ipis, "the link's munmaps reach the other CPUs");
    assert!(sys.vm_stats().v_cow_faults > 0);
    assert!(promotions(&sys) > 0);
    assert!(!r.figure.higher_is_better);
}

#[test]
fn stress_workers_allocate_touch_and_free() {
    let mut sys = system(256 << 20, true, false);
    let free = sys.free_pages();
    let mut s = Stress::new(Some(5), 4 << 20, 2).unwrap();
    let r = run(&mut s, &mut sys);
    assert!(r.report.contains("dispatching hogs: 0 cpu, 0 io, 5 vm, 0 hdd"), "{}", r.report);
    assert!(r.report.contains("successful run completed in"), "{}", r.report);
    assert_eq!(sys.vm_stats().v_zfod, 5 * 2 * 1024);
    assert_eq!(sys.free_pages(), free, "everything freed");
}

#[test]
fn realloc_stops_cleanly_when_memory_is_full() {
    for (sp, in_place) in [(false, true), (true, true), (true, false)] {
        let mut sys = system(64 << 20, sp, false);
        let free = sys.free_pages();
        let mut a = Realloc::new(1 << 20).unwrap();
        a.in_place = in_place;
        let r = run(&mut a, &mut sys);
        assert!(r.report.contains("stopped: out of memory"), "{}", r.report);
        let mb: f64 = r.report.lines().find_map(|l| l.strip_prefix("memory written: ")).unwrap().split(' ').next().unwrap().parse().unwrap();
        if in_place {
            assert!(r.report.contains(" 0 moved"), "{}", r.report);
            assert!(mb > 48.0 && mb < 64.0, "{}", r.report);
        } else {
            // Old and new copies must both fit: at most half of memory.
            assert!(r.report.contains(" 0 grown in place"), "{}", r.report);
            assert!((16.0..=32.0).contains(&mb), "{}", r.report);
        }
        assert_eq!(sys.free_pages(), free, "everything freed after the exit");
        sys.check_invariants().unwrap();
    }
}

/// `--pages`: the chunks a layout keeps in 4 KB pages are never promoted,
/// the others are, chunk for chunk as `mix_chunks` (the native mix) says.
#[test]
fn page_layouts_promote_the_chunks_asked_for() {
    use splab_workloads::gups::Gups;
    use splab_workloads::layout::PageLayout;
    // A 16 MiB table: 8 chunks of 2 MB.
    let mut got = Vec::new();
    for layout in [PageLayout::TwoM, PageLayout::Mix(0.5), PageLayout::FourK] {
        let mut sys = system(256 << 20, true, false);
        let mut g = Gups::new(21).unwrap();
        g.pages.asked = Some(layout);
        run(&mut g, &mut sys);
        let l = g.layout().expect("a layout report").clone();
        assert_eq!((l.chunks, l.short, l.unexpected), (8, 0, 0), "{layout}: {l:?}");
        assert_eq!(l.chunks_2m_obtained, l.chunks_2m_asked, "{layout}: {l:?}");
        got.push((promotions(&sys), l.chunks_2m_obtained));
    }
    assert_eq!(got[0], (8, 8), "all 2m");
    assert_eq!(got[1], (4, 4), "mix:0.5: half the promotions of all-2m");
    assert_eq!(got[2], (0, 0), "4k, which is mix:0");
    assert_eq!(PageLayout::Mix(0.0).chunks(8), PageLayout::FourK.chunks(8));
    // Without a layout nothing is reported.
    let mut g = Gups::new(12).unwrap();
    run(&mut g, &mut system(64 << 20, true, false));
    assert!(g.layout().is_none());
}

/// The core's window bounds GUPS's misses in flight (`kernels::Kernel::
/// Gups`, 21 instructions for two updates): a window of 42 entries holds
/// four updates, so each update's miss overlaps with three others instead
/// of the sixteen line-fill buffers' worth a 512-entry window allows; a
/// window that small slows GUPS about fourfold, and STREAM, whose
/// prefetched lines stream at the prefetcher's rate, far less.
#[test]
fn the_window_bounds_gups_misses_in_flight() {
    use splab_workloads::gups::Gups;
    let timed = |rob: u32, w: &mut dyn Workload| {
        let mut p = splab_hw::profile::Profile::load("sapphire-rapids").unwrap();
        p.core.rob = rob;
        p.core.mshrs = 16;
        let mut c = Config::new(p);
        c.memory = 256 << 20;
        let mut sys = System::new(c).unwrap();
        run(w, &mut sys).timed_seconds
    };
    let (wide, narrow) = (timed(512, &mut Gups::new(21).unwrap()), timed(42, &mut Gups::new(21).unwrap()));
    assert!(narrow > 2.5 * wide && narrow < 5.0 * wide, "window 42: {narrow} s, 512: {wide} s");
    let (a, b) = (timed(512, &mut Stream::new(1 << 20, 2).unwrap()), timed(42, &mut Stream::new(1 << 20, 2).unwrap()));
    assert!(b < 2.0 * a, "STREAM: window 42: {b} s, 512: {a} s");
}

/// Nested paging: GUPS's walks cost more with 4 KB host pages than with
/// 2 MB ones. Over 2 MB host pages guest 2 MB superpages gain as much as
/// natively (here the nested TLB holds the table's two host pages); over 4 KB host
/// pages they gain little, since the TLB holds them as 4 KB pieces: they
/// shorten the walks but do not widen the TLB's reach (as an AMD EPYC
/// guest over 4 KB host pages measures with `splab native gups --pages
/// 4k,thp`: 1.03x to 1.12x faster in 2 MB pages). The STLB is cut to 64 entries so that a small table
/// misses as a large one does, and the walkers to one so that its short
/// native walks (page-table lines in L1 and L2) bound GUPS as a large
/// table's do (with four, GUPS 2^19 gains 0.7 % from superpages natively,
/// and the comparison says nothing).
#[test]
fn nested_walks_cost_more_with_small_host_pages_and_superpages_help_only_over_large_ones() {
    use splab_hw::nested::VirtConfig;
    use splab_workloads::gups::Gups;
    let run_gups = |host_page: Option<&str>, superpages: bool| {
        let mut p = splab_hw::profile::Profile::load("sapphire-rapids").unwrap();
        for t in p.tlb.iter_mut().filter(|t| t.level == 2) {
            t.entries = 64;
        }
        p.core.walkers = 1;
        p.virt = host_page.map(|h| VirtConfig { nested: true, host_page: h.into(), ntlb_entries: 16, host_pwc: None });
        let mut c = Config::new(p);
        c.memory = 256 << 20;
        c.superpages = superpages;
        let mut sys = System::new(c).unwrap();
        let r = run(&mut Gups::new(19).unwrap(), &mut sys);
        let hw = sys.hw();
        let per_walk = hw.walk_mem_refs as f64 / hw.walks as f64;
        if host_page.is_some() {
            assert_eq!(sys.sysctls().get_int("splab.walk.nested_refs"), Some(hw.nested_refs as i64));
        } else {
            assert_eq!(hw.nested_refs, 0);
        }
        (r.figure.value, per_walk)
    };
    let (native_off, native_walk) = run_gups(None, false);
    let (native_on, _) = run_gups(None, true);
    let (n4k_off, n4k_walk) = run_gups(Some("4K"), false);
    let (n4k_on, _) = run_gups(Some("4K"), true);
    let (n2m_off, n2m_walk) = run_gups(Some("2M"), false);
    let (n2m_on, _) = run_gups(Some("2M"), true);
    assert!(n4k_walk > n2m_walk && n2m_walk > native_walk, "refs per walk: host 4K {n4k_walk}, host 2M {n2m_walk}, native {native_walk}");
    assert!(n4k_off < n2m_off && n2m_off <= native_off * (1.0 + 1e-9), "GUP/s with 4 KB guest pages: host 4K {n4k_off}, host 2M {n2m_off}, native {native_off}");
    let (gain_native, gain_2m, gain_4k) = (native_on / native_off, n2m_on / n2m_off, n4k_on / n4k_off);
    assert!(gain_2m >= gain_native * (1.0 - 1e-9), "superpage gain: nested over 2 MB host pages {gain_2m}, native {gain_native}");
    assert!(gain_4k > 1.0 && gain_4k < 0.5 * (1.0 + gain_native), "superpage gain: nested over 4 KB host pages {gain_4k} (shorter walks only), native {gain_native}");
}

/// bw_mmap_rd's timed pass maps a file whose pages are resident in fully
/// populated reservations: FreeBSD today maps each reservation with one
/// superpage at its first fault; with `splab.vm.soft_fault_superpages=0`
/// (FreeBSD 10 and before) every page faults alone and the superpages
/// come from promotion, so the pass takes a fault a page.
#[test]
fn a_soft_fault_maps_a_superpage_unless_the_kernel_predates_it() {
    let size = 8u64 << 20;
    let faults = |soft: &str| {
        let mut c = Config::new(splab_hw::profile::Profile::load("sapphire-rapids").unwrap());
        c.memory = 256 << 20;
        c.superpages = true;
        c.tunables = vec![("splab.vm.soft_fault_superpages".into(), soft.into())];
        let mut sys = System::new(c).unwrap();
        let mut b = Bw { size, tests: vec!["mmap_rd".into()], cpu: 0 };
        run(&mut b, &mut sys);
        (sys.vm_stats().soft_fast_superpage, sys.events().faults, sys.events().promotions)
    };
    let (sp1, f1, p1) = faults("1");
    let (sp0, f0, p0) = faults("0");
    let pages = size / 4096;
    // Reading the file in faults every page; the timed pass faults once a
    // 2 MB reservation, or again every page.
    assert_eq!((sp1, f1, p1), (size >> 21, pages + (size >> 21), size >> 21));
    assert_eq!((sp0, f0, p0), (0, 2 * pages, 2 * (size >> 21)));
}

/// A loop that touches every line of a range steps the machine's line
/// where it is shorter than 64 bytes: on 32-byte lines bcopy (libc) and
/// the zeroing before it make twice the stores, one a line, and the
/// progress estimate counts them.
#[test]
fn line_loops_step_a_shorter_machine_line() {
    let stores = |line: Option<u64>| {
        let mut p = splab_hw::profile::Profile::load("sapphire-rapids").unwrap();
        p.cache.line_bytes = line;
        let mut c = Config::new(p);
        c.memory = 256 << 20;
        let mut sys = System::new(c).unwrap();
        let mut b = Bw::new(256 << 10, vec!["bcopy_libc".into()]).unwrap();
        run(&mut b, &mut sys);
        sys.hw().stores
    };
    let (s64, s32) = (stores(None), stores(Some(32)));
    assert_eq!(s64, 3 * (256 << 10) / 64);
    assert_eq!(s32, 2 * s64);
    let b = Bw::new(256 << 10, vec!["bcopy_libc".into()]).unwrap();
    assert_eq!(b.estimated_refs(32), 2 * b.estimated_refs(64));
    assert_eq!(b.estimated_refs(128), b.estimated_refs(64));
}
